/* ncclmpi_info: what this ncclmpi is, what it finds on this machine, and how it is configured.
 * `ncclmpi_info --help` lists the options. The CUDA driver and NCCL are dlopen'ed, as the library
 * does: nothing here links against them, so it runs (and says so) where they are missing. */
#define _GNU_SOURCE
#include <cuda.h> /* types and constants only */
#include <dlfcn.h>
#include <hwloc.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ncclmpi.h"
#include "nm_build.h"
#include "nm_entry_points.h" /* NM_CU_FUNCTIONS, NM_NCCL_REQUIRED, NM_NCCL_OPTIONAL of src/core */
#include "route/route.h"
#include "util/config.h"
#include "util/stats.h"

#ifndef NM_PREFIX
#define NM_PREFIX "unknown"
#endif
#ifndef NM_LIBDIR
#define NM_LIBDIR "unknown"
#endif
#ifndef NM_CU_FUNCTIONS
#define NM_CU_FUNCTIONS(X) X(cuInit)
#endif
#ifndef NM_NCCL_REQUIRED
#define NM_NCCL_REQUIRED(X) X(ncclGetVersion)
#endif
#ifndef NM_NCCL_OPTIONAL
#define NM_NCCL_OPTIONAL(X)
#endif

#define NM_STR_(x) #x
#define NM_XSTR(x) NM_STR_(x) /* through cuda.h's macros: cuMemAlloc -> "cuMemAlloc_v2" */

static const char usage_text[] =
    "usage: ncclmpi_info [OPTION]...\n"
    "What this ncclmpi is, what it finds on this machine, and how it is configured. The options\n"
    "follow ompi_info's where it has them (-c, -a, --parsable).\n"
    "\n"
    "  -c, --config     build configuration: versions of the MPI, CUDA, NCCL and hwloc headers,\n"
    "                   compilers, installation paths, configure flags (the default; -b, --build too)\n"
    "  -f, --functions  the intercepted MPI functions and what each does with device buffers\n"
    "  -p, --probe      run-time probe, loading what the library loads: the MPI library, libncclmpi,\n"
    "                   hwloc, the CUDA driver, the GPUs (UUID, PCI bus id, NUMA node, CPUs, MPS), peer\n"
    "                   access between them, the NCCL library, its version against the headers and\n"
    "                   what ncclmpi does differently for that version\n"
    "  -s, --settings   every NCCLMPI_* setting: type, default, accepted values, current value, meaning\n"
    "  -m, --markdown   the settings as Markdown (doc/config.md)\n"
    "  -a, --all        all of -c -f -p -s\n"
    "      --parsable   colon-separated lines, as ompi_info prints them: the key's parts, then the\n"
    "                   value (build:prefix:/usr/local, probe:gpu:0:name:..., setting:NCCLMPI_LOG:value:WARN)\n"
    "  -V, --version    print the version and exit\n"
    "  -h, --help       print this help and exit\n"
    "\n"
    "Settings are read from NCCLMPI_* environment variables: the probe uses NCCLMPI_CUDA_LIB and\n"
    "NCCLMPI_NCCL_LIB as the library would. man ncclmpi_info says more. Exit status: 0, or 2 for a\n"
    "wrong option.\n";

/* ---- output: a report, or key:value lines ---------------------------------------------------- */

static int parsable, sections;

static void section(const char *title)
{
    if (parsable) return;
    printf("%s%s\n", sections++ ? "\n" : "", title);
}

/* One fact: `key:raw` when parsable (raw NULL: the formatted text), else `label : text`. */
static void fact(const char *key, const char *raw, const char *label, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fact(const char *key, const char *raw, const char *label, const char *fmt, ...)
{
    char text[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (parsable) {
        const char *v = raw ? raw : text;
        for (const char *k = key; *k; k++) putchar(*k == '.' ? ':' : *k); /* ompi_info's separator */
        putchar(':');
        for (; *v; v++) putchar(*v == '\n' ? ' ' : *v);
        putchar('\n');
    } else if (label) {
        printf("  %-22s: %s\n", label, text);
    }
}

/* A line of the report only (tables). */
static void line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void line(const char *fmt, ...)
{
    if (parsable) return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
}

static const char *trim(const char *s)
{
    while (*s == ' ') s++;
    return s;
}

static const char *nccl_version_str(int code, char *buf, size_t n)
{
    if (code >= 10000) snprintf(buf, n, "%d.%d.%d", code / 10000, code % 10000 / 100, code % 100);
    else snprintf(buf, n, "%d.%d.%d", code / 1000, code % 1000 / 100, code % 100);
    return buf;
}

/* ---- build facts ---------------------------------------------------------------------------- */

static void print_build(void)
{
    char v[64];
    section("Build");
    fact("build.prefix", NULL, "prefix", "%s", NM_PREFIX);
    fact("build.libdir", NULL, "libdir", "%s", NM_LIBDIR);
    const char *args = trim(NM_CONFIGURE_ARGS);
    fact("build.configure_args", args, "configure flags", "%s", *args ? args : "(none)");
#if defined(OMPI_MAJOR_VERSION)
    snprintf(v, sizeof(v), "Open MPI %d.%d.%d", OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION, OMPI_RELEASE_VERSION);
#elif defined(MPICH_VERSION)
    snprintf(v, sizeof(v), "MPICH %s", MPICH_VERSION);
#else
    snprintf(v, sizeof(v), "%s", NM_BUILD_MPI);
#endif
    fact("build.mpi", v, "MPI (mpi.h)", "%s, MPI standard %d.%d", v, MPI_VERSION, MPI_SUBVERSION);
    snprintf(v, sizeof(v), "%d.%d", MPI_VERSION, MPI_SUBVERSION);
    fact("build.mpi.standard", v, NULL, "%s", v);
    fact("build.cc", NULL, "C compiler", "%s", NM_BUILD_CC);
    fact("build.cxx", NULL, "C++ compiler", "%s", NM_BUILD_CXX);
    fact("build.mpiexec", NULL, "mpiexec", "%s", NM_BUILD_MPIEXEC);
    fact("build.cuda.headers", NM_BUILD_CUDA_VERSION, "CUDA headers", "%s (%s/include; the driver is loaded at run time)",
         NM_BUILD_CUDA_VERSION, NM_BUILD_CUDA_DIR);
    fact("build.cuda.dir", NM_BUILD_CUDA_DIR, NULL, "%s", NM_BUILD_CUDA_DIR);
    fact("build.nccl.headers", NM_NCCL_BUILD_VERSION, "NCCL headers", "%s (%s)", NM_NCCL_BUILD_VERSION,
         NM_BUILD_NCCL_INCDIR);
    fact("build.nccl.include", NM_BUILD_NCCL_INCDIR, NULL, "%s", NM_BUILD_NCCL_INCDIR);
    fact("build.nccl.default_lib", NM_NCCL_DEFAULT_LIB, "NCCL library", "%s (dlopen'ed at the first device-buffer call)",
         NM_NCCL_DEFAULT_LIB);
    snprintf(v, sizeof(v), "0x%x", (unsigned)NM_BUILD_HWLOC_API);
    fact("build.hwloc.headers", NM_BUILD_HWLOC_VERSION, "hwloc headers", "%s (API %s), %s", NM_BUILD_HWLOC_VERSION, v,
         NM_BUILD_HWLOC_DIR);
    fact("build.hwloc.api", v, NULL, "%s", v);
    fact("build.kernels", NM_BUILD_KERNELS, "one-shot kernels", "%s", NM_BUILD_KERNELS);
    snprintf(v, sizeof(v), "%d", NM_FN_COUNT);
    fact("build.functions", v, "intercepted", "%d MPI functions, C and Fortran (-f lists them)", NM_FN_COUNT);
}

/* What each intercepted function does with device buffers (the generator's coverage list). */
static const struct {
    const char *name, *what;
} coverage[] = {
#define NM_INFO_COV(n, what) {#n, what},
    NM_FN_COVERAGE(NM_INFO_COV)
#undef NM_INFO_COV
};

static void print_functions(void)
{
    const int n = (int)(sizeof(coverage) / sizeof(coverage[0]));
    if (parsable) {
        printf("functions:count:%d\n", n);
        for (int i = 0; i < n; i++) printf("functions:MPI_%s:%s\n", coverage[i].name, coverage[i].what);
        return;
    }
    static const char *const kinds[][2] = {
        {"routed", "device buffers on NCCL (staged where NCCL cannot); a persistent collective's starts run its\n"
                   "    nonblocking form"},
        {"point-to-point", "device buffers: large contiguous messages as envelopes through the real MPI, the\n"
                           "    receiver copying the payload from the sender's GPU (one node, NCCLMPI_P2P_ENVELOPE), others staged;\n"
                           "    neighbourhood collectives as such messages where envelopes reach device memory, else staged"},
        {"staged", "device buffers through host copies and the real MPI"},
        {"rejected-on-device", "device buffers refused with MPI_ERR_BUFFER, never passed to the real MPI"},
        {"unsupported-on-device", "device buffers refused with MPI_ERR_UNSUPPORTED_OPERATION (MPI-4 large-count\n"
                                  "    persistent collectives with count arrays), never passed to the real MPI"},
        {"device-window", "one-sided: windows in device memory through CUDA IPC (one node), device origins staged"},
        {"flush-only", "no buffer; launches queued device work, then the real MPI"},
        {"host-only", "no buffer; the real MPI (completion and lifecycle calls)"},
    };
    /* columns as wide as the longest name and a space, as many as fit in 100 characters */
    int width = 0;
    for (int i = 0; i < n; i++)
        if ((int)strlen(coverage[i].name) + 1 > width) width = (int)strlen(coverage[i].name) + 1;
    const int cols = width < 96 ? 96 / width : 1;
    char title[64];
    snprintf(title, sizeof(title), "Intercepted MPI functions (%d)", n);
    section(title);
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        int count = 0, col = 0;
        for (int i = 0; i < n; i++) count += !strcmp(coverage[i].what, kinds[k][0]);
        if (!count) continue;
        printf("  %s (%d): %s\n", kinds[k][0], count, kinds[k][1]);
        for (int i = 0; i < n; i++) {
            if (strcmp(coverage[i].what, kinds[k][0])) continue;
            int last = col % cols == cols - 1;
            printf("%s%-*s", col % cols ? "" : "    ", last ? 0 : width, coverage[i].name);
            if (++col % cols == 0) putchar('\n');
        }
        if (col % cols) putchar('\n');
    }
    printf("  Where ranks share a GPU (NCCL refuses them), the blocking collectives whose counts every rank\n"
           "  knows (Scan and Exscan included) run on that GPU through CUDA IPC windows from NCCLMPI_SHARED_MIN\n"
           "  bytes (NCCLMPI_SHARED_GPU).\n");
}

/* ---- run-time probe ------------------------------------------------------------------------- */

static hwloc_topology_t topo;

static void probe_mpi(void)
{
    char ver[MPI_MAX_LIBRARY_VERSION_STRING + 1] = "";
    int len = 0;
    MPI_Get_library_version(ver, &len); /* allowed before MPI_Init (MPI-3) */
    while (len > 0 && (ver[len - 1] == '\n' || ver[len - 1] == ' ')) ver[--len] = 0;
    for (char *p = ver; *p; p++)
        if (*p == '\n') *p = ';';
    fact("probe.mpi.library", NULL, "MPI library", "%s", ver);
    char lib[4200];
    snprintf(lib, sizeof(lib), "%s/libncclmpi.so", NM_LIBDIR);
    int there = access(lib, R_OK) == 0;
    fact("probe.libncclmpi", there ? lib : "not installed", "libncclmpi", "%s (%s)", lib,
         there ? "installed" : "not installed yet");
}

static void probe_hwloc(void)
{
    char v[32];
    unsigned api = hwloc_get_api_version();
    snprintf(v, sizeof(v), "0x%x", api);
    const int same = (api >> 16) == ((unsigned)NM_BUILD_HWLOC_API >> 16);
    fact("probe.hwloc.api", v, "hwloc library", "API %s (%s the headers' 0x%x)", v, same ? "same major as" : "differs from",
         (unsigned)NM_BUILD_HWLOC_API);
    if (hwloc_topology_init(&topo) != 0) { topo = NULL; }
    if (topo) {
        hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
        if (hwloc_topology_load(topo) != 0) { hwloc_topology_destroy(topo); topo = NULL; }
    }
    if (!topo) { fact("probe.hwloc.topology", "unavailable", "topology", "unavailable (hwloc failed to load it)"); return; }
    int pk = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE), nn = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE),
        co = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE), pu = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
    char raw[128];
    snprintf(raw, sizeof(raw), "packages=%d numa_nodes=%d cores=%d pus=%d", pk, nn, co, pu);
    fact("probe.hwloc.topology", raw, "topology", "%d package%s, %d NUMA node%s, %d cores, %d hardware threads", pk,
         pk == 1 ? "" : "s", nn, nn == 1 ? "" : "s", co, pu);
}

/* NUMA node(s) and CPUs near a PCI device, as the staging path finds them. */
static void pci_locality(const char *bus, char *numa, size_t nn, char *cpus, size_t cn)
{
    snprintf(numa, nn, "unknown");
    snprintf(cpus, cn, "unknown");
    if (!topo) return;
    hwloc_obj_t pci = hwloc_get_pcidev_by_busidstring(topo, bus);
    hwloc_obj_t anc = pci ? hwloc_get_non_io_ancestor_obj(topo, pci) : NULL;
    if (!anc) return;
    if (anc->nodeset && !hwloc_bitmap_iszero(anc->nodeset)) hwloc_bitmap_list_snprintf(numa, nn, anc->nodeset);
    if (anc->cpuset && !hwloc_bitmap_iszero(anc->cpuset)) hwloc_bitmap_list_snprintf(cpus, cn, anc->cpuset);
}

struct cu_api {
    void *h;
    CUresult (*Init)(unsigned);
    CUresult (*DriverGetVersion)(int *);
    CUresult (*GetErrorName)(CUresult, const char **);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetName)(char *, int, CUdevice);
    CUresult (*DeviceGetUuid)(CUuuid *, CUdevice);
    CUresult (*DeviceGetPCIBusId)(char *, int, CUdevice);
    CUresult (*DeviceTotalMem)(size_t *, CUdevice);
    CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*DeviceCanAccessPeer)(int *, CUdevice, CUdevice);
    CUresult (*DeviceGetP2PAttribute)(int *, CUdevice_P2PAttribute, CUdevice, CUdevice);
};

static void *sym(void *h, const char *name, const char *fallback)
{
    void *p = dlsym(h, name);
    return p || !fallback ? p : dlsym(h, fallback);
}

static const char *cu_err(const struct cu_api *cu, CUresult r, char *buf, size_t n)
{
    /* by number: older headers lack some of the names; the stub library has no error strings */
    static const struct { int r; const char *name; } known[] = {
        {3, "CUDA_ERROR_NOT_INITIALIZED"},
        {34, "CUDA_ERROR_STUB_LIBRARY (the CUDA toolkit's stub libcuda, not a driver)"},
        {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH (libcuda does not match the kernel driver)"},
        {100, "CUDA_ERROR_NO_DEVICE (no GPU visible; CUDA_VISIBLE_DEVICES?)"},
        {304, "CUDA_ERROR_OPERATING_SYSTEM"},
        {804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"},
    };
    const char *name = NULL;
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (known[i].r == (int)r) name = known[i].name;
    if (!name && cu->GetErrorName && cu->GetErrorName(r, &name) != CUDA_SUCCESS) name = NULL;
    if (name) snprintf(buf, n, "%s", name);
    else snprintf(buf, n, "CUresult %d", (int)r);
    return buf;
}

static void probe_gpus(const struct cu_api *cu, int n)
{
    CUdevice dev[64];
    if (n > 64) n = 64;
    for (int i = 0; i < n; i++) {
        char key[64], label[32], name[256] = "?", bus[32] = "", uuid[64] = "unknown", numa[64], cpus[1024], cc[16] = "?";
        size_t mem = 0;
        int major = 0, minor = 0;
        if (cu->DeviceGet(&dev[i], i) != CUDA_SUCCESS) { dev[i] = -1; continue; }
        if (cu->DeviceGetName) cu->DeviceGetName(name, sizeof(name), dev[i]);
        CUuuid u;
        if (cu->DeviceGetUuid && cu->DeviceGetUuid(&u, dev[i]) == CUDA_SUCCESS) {
            const unsigned char *b = (const unsigned char *)u.bytes;
            snprintf(uuid, sizeof(uuid), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                     b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
        }
        if (!cu->DeviceGetPCIBusId || cu->DeviceGetPCIBusId(bus, sizeof(bus), dev[i]) != CUDA_SUCCESS)
            snprintf(bus, sizeof(bus), "unknown");
        if (cu->DeviceTotalMem) cu->DeviceTotalMem(&mem, dev[i]);
        if (cu->DeviceGetAttribute &&
            cu->DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev[i]) == CUDA_SUCCESS &&
            cu->DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev[i]) == CUDA_SUCCESS)
            snprintf(cc, sizeof(cc), "%d.%d", major, minor);
        pci_locality(bus, numa, sizeof(numa), cpus, sizeof(cpus));
        char memraw[32];
        snprintf(memraw, sizeof(memraw), "%zu", mem);
        snprintf(label, sizeof(label), "GPU%d", i);
        snprintf(key, sizeof(key), "probe.gpu.%d.name", i);
        fact(key, name, label, "%s, %.1f GiB, compute capability %s", name, mem / 1073741824.0, cc);
        snprintf(key, sizeof(key), "probe.gpu.%d.memory_bytes", i);
        fact(key, memraw, NULL, "%s", memraw);
        snprintf(key, sizeof(key), "probe.gpu.%d.compute_capability", i);
        fact(key, cc, NULL, "%s", cc);
        snprintf(key, sizeof(key), "probe.gpu.%d.uuid", i);
        fact(key, NULL, "  UUID", "%s", uuid);
        snprintf(key, sizeof(key), "probe.gpu.%d.pci_bus_id", i);
        fact(key, NULL, "  PCI bus id", "%s", bus);
        snprintf(key, sizeof(key), "probe.gpu.%d.numa_node", i);
        fact(key, NULL, "  NUMA node", "%s", numa);
        snprintf(key, sizeof(key), "probe.gpu.%d.cpuset", i);
        fact(key, NULL, "  CPUs", "%s", cpus);
        /* CU_DEVICE_ATTRIBUTE_MPS_ENABLED (133; a driver that does not know it: unknown). Processes
         * of this environment that share the GPU without MPS are time-sliced by it. */
        int mps = -1;
        if (!cu->DeviceGetAttribute || cu->DeviceGetAttribute(&mps, (CUdevice_attribute)133, dev[i]) != CUDA_SUCCESS) mps = -1;
        snprintf(key, sizeof(key), "probe.gpu.%d.mps", i);
        fact(key, mps < 0 ? "unknown" : mps ? "1" : "0", "  MPS", "%s",
             mps < 0 ? "unknown (the driver does not say)"
             : mps   ? "yes: processes that share this GPU run side by side"
                     : "no: processes that share this GPU take turns in time slices (doc/user-guide.md, \"Ranks sharing a GPU\")");
    }
    if (n < 2) return;
    /* peer access: NVLink when the link carries every CUDA atomic natively, PCIe when not */
    line("  peer access (P2P)     : NV = NVLink (native atomics), PCI = PCIe, - = none; (n) = performance rank");
    char row[1024];
    int o = snprintf(row, sizeof(row), "  %26s", "");
    for (int j = 0; j < n && o < (int)sizeof(row) - 16; j++) {
        char h[16];
        snprintf(h, sizeof(h), "GPU%d", j);
        o += snprintf(row + o, sizeof(row) - o, " %9s", h);
    }
    line("%s", row);
    for (int i = 0; i < n; i++) {
        o = snprintf(row, sizeof(row), "  %20sGPU%-3d", "", i);
        for (int j = 0; j < n && o < (int)sizeof(row) - 16; j++) {
            char cell[32], key[64];
            const char *kind;
            int access = 0, atomics = 0, rank = -1;
            if (i == j) kind = "self";
            else {
                if (dev[i] >= 0 && dev[j] >= 0 && cu->DeviceCanAccessPeer) cu->DeviceCanAccessPeer(&access, dev[i], dev[j]);
                if (access && cu->DeviceGetP2PAttribute) {
                    cu->DeviceGetP2PAttribute(&atomics, CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED, dev[i], dev[j]);
                    cu->DeviceGetP2PAttribute(&rank, CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, dev[i], dev[j]);
                }
                kind = !access ? "none" : atomics ? "nvlink" : "pcie";
            }
            if (i == j) snprintf(cell, sizeof(cell), "X");
            else if (!access) snprintf(cell, sizeof(cell), "-");
            else snprintf(cell, sizeof(cell), "%s(%d)", atomics ? "NV" : "PCI", rank);
            o += snprintf(row + o, sizeof(row) - o, " %9s", cell);
            if (parsable && i != j) {
                snprintf(key, sizeof(key), "probe.p2p.%d.%d.link", i, j);
                fact(key, kind, NULL, "%s", kind);
                snprintf(key, sizeof(key), "probe.p2p.%d.%d.access", i, j);
                fact(key, NULL, NULL, "%d", access);
                snprintf(key, sizeof(key), "probe.p2p.%d.%d.native_atomics", i, j);
                fact(key, NULL, NULL, "%d", atomics);
                snprintf(key, sizeof(key), "probe.p2p.%d.%d.perf_rank", i, j);
                fact(key, NULL, NULL, "%d", rank);
            }
        }
        line("%s", row);
    }
}

static void probe_cuda(void)
{
    const char *lib = nm_cfg.CUDA_LIB;
    struct cu_api cu;
    memset(&cu, 0, sizeof(cu));
    dlerror();
    cu.h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!cu.h) {
        const char *e = dlerror();
        fact("probe.cuda.driver", "none", "CUDA driver", "no CUDA driver (%s)", e ? e : lib);
        fact("probe.cuda.error", NULL, NULL, "%s", e ? e : lib);
        fact("probe.gpu.count", "0", "GPUs", "none (no CUDA driver)");
        return;
    }
    cu.Init = (CUresult(*)(unsigned))dlsym(cu.h, NM_XSTR(cuInit));
    cu.DriverGetVersion = (CUresult(*)(int *))dlsym(cu.h, NM_XSTR(cuDriverGetVersion));
    cu.GetErrorName = (CUresult(*)(CUresult, const char **))dlsym(cu.h, NM_XSTR(cuGetErrorName));
    cu.DeviceGetCount = (CUresult(*)(int *))dlsym(cu.h, NM_XSTR(cuDeviceGetCount));
    cu.DeviceGet = (CUresult(*)(CUdevice *, int))dlsym(cu.h, NM_XSTR(cuDeviceGet));
    cu.DeviceGetName = (CUresult(*)(char *, int, CUdevice))dlsym(cu.h, NM_XSTR(cuDeviceGetName));
    cu.DeviceGetUuid = (CUresult(*)(CUuuid *, CUdevice))sym(cu.h, NM_XSTR(cuDeviceGetUuid), "cuDeviceGetUuid");
    cu.DeviceGetPCIBusId = (CUresult(*)(char *, int, CUdevice))dlsym(cu.h, NM_XSTR(cuDeviceGetPCIBusId));
    cu.DeviceTotalMem = (CUresult(*)(size_t *, CUdevice))dlsym(cu.h, NM_XSTR(cuDeviceTotalMem));
    cu.DeviceGetAttribute = (CUresult(*)(int *, CUdevice_attribute, CUdevice))dlsym(cu.h, NM_XSTR(cuDeviceGetAttribute));
    cu.DeviceCanAccessPeer = (CUresult(*)(int *, CUdevice, CUdevice))dlsym(cu.h, NM_XSTR(cuDeviceCanAccessPeer));
    cu.DeviceGetP2PAttribute =
        (CUresult(*)(int *, CUdevice_P2PAttribute, CUdevice, CUdevice))dlsym(cu.h, NM_XSTR(cuDeviceGetP2PAttribute));
    Dl_info di;
    const char *path = cu.Init && dladdr((void *)cu.Init, &di) && di.dli_fname ? di.dli_fname : lib;
    /* the entry points the library resolves (src/core/cuda/cuda_api.h) */
    static const char *const needed[] = {
#define NM_NAME(f) NM_XSTR(f),
        NM_CU_FUNCTIONS(NM_NAME)
#undef NM_NAME
    };
    char missing[1024] = "";
    size_t mo = 0;
    for (size_t i = 0; i < sizeof(needed) / sizeof(needed[0]); i++)
        if (!dlsym(cu.h, needed[i]) && mo < sizeof(missing) - 64)
            mo += (size_t)snprintf(missing + mo, sizeof(missing) - mo, "%s%s", mo ? " " : "", needed[i]);
    int drv = 0;
    char ver[32] = "unknown", err[160];
    if (cu.DriverGetVersion && cu.DriverGetVersion(&drv) == CUDA_SUCCESS)
        snprintf(ver, sizeof(ver), "%d.%d", drv / 1000, drv % 1000 / 10);
    CUresult r = cu.Init ? cu.Init(0) : CUDA_ERROR_NOT_FOUND;
    if (r != CUDA_SUCCESS) {
        cu_err(&cu, r, err, sizeof(err));
        fact("probe.cuda.driver", path, "CUDA driver", "%s (driver version %s); cuInit failed: %s", path, ver, err);
        fact("probe.cuda.version", ver, NULL, "%s", ver);
        fact("probe.cuda.init", err, NULL, "%s", err);
        fact("probe.cuda.error", err, NULL, "%s", err);
        fact("probe.gpu.count", "0", "GPUs", "none (cuInit failed: %s)", err);
        return;
    }
    fact("probe.cuda.driver", path, "CUDA driver", "%s, CUDA %s (headers: %s)", path, ver, NM_BUILD_CUDA_VERSION);
    fact("probe.cuda.version", ver, NULL, "%s", ver);
    fact("probe.cuda.init", "CUDA_SUCCESS", NULL, "ok");
    fact("probe.cuda.missing", mo ? missing : "none", "  entry points", "%s%s", mo ? "missing: " : "all the library uses are present",
         mo ? missing : "");
    int n = 0;
    if (!cu.DeviceGetCount || (r = cu.DeviceGetCount(&n)) != CUDA_SUCCESS) {
        fact("probe.gpu.count", "0", "GPUs", "none (cuDeviceGetCount: %s)", cu_err(&cu, r, err, sizeof(err)));
        return;
    }
    char raw[16];
    snprintf(raw, sizeof(raw), "%d", n);
    fact("probe.gpu.count", raw, "GPUs", "%d", n);
    probe_gpus(&cu, n);
}

static void probe_nccl(void)
{
    const char *lib = nm_cfg.NCCL_LIB;
    char hv[32], fv[32];
    nccl_version_str(NM_NCCL_BUILD_CODE, hv, sizeof(hv));
    dlerror();
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        fact("probe.nccl.lib", "none", "NCCL library", "not found (%s); device-buffer calls would take the staged path",
             e ? e : lib);
        fact("probe.nccl.error", NULL, NULL, "%s", e ? e : lib);
        return;
    }
    int (*get_version)(int *) = (int (*)(int *))dlsym(h, "ncclGetVersion");
    Dl_info di;
    const char *path = get_version && dladdr((void *)get_version, &di) && di.dli_fname ? di.dli_fname : lib;
    int code = 0;
    if (get_version) get_version(&code);
    nccl_version_str(code, fv, sizeof(fv));
    const char *cmp = code == NM_NCCL_BUILD_CODE ? "the version of the headers"
                      : code > NM_NCCL_BUILD_CODE ? "newer than the headers,"
                                                   : "older than the headers,";
    fact("probe.nccl.lib", path, "NCCL library", "%s", path);
    if (code == NM_NCCL_BUILD_CODE) fact("probe.nccl.version", fv, "  version", "%s (%s)", fv, cmp);
    else fact("probe.nccl.version", fv, "  version", "%s (%s %s)", fv, cmp, hv);
    /* what ncclmpi does differently for this version (route.h); any communicator of 2 ranks or more */
    const int apart = nm_minmax_hazard(code, 2);
    fact("probe.nccl.minmax_apart", apart ? "yes" : "no", apart ? "  MAX and MIN" : NULL,
         "never in one NCCL group (this version can mix them up there: doc/design.md)");
    fact("probe.nccl.headers", hv, NULL, "%s", hv);
    fact("probe.nccl.match", code == NM_NCCL_BUILD_CODE ? "same" : code > NM_NCCL_BUILD_CODE ? "newer" : "older", NULL,
         "%s", "");
    /* the entry points the library resolves (src/core/tl/nccl/nccl_api.h) */
    static const char *const req[] = {
#define NM_NAME(f) #f,
        NM_NCCL_REQUIRED(NM_NAME)
#undef NM_NAME
    };
    static const char *const opt[] = {
#define NM_NAME(f) #f,
        NM_NCCL_OPTIONAL(NM_NAME) NULL
#undef NM_NAME
    };
    char missing[1024] = "", absent[512] = "";
    size_t mo = 0, ao = 0;
    for (size_t i = 0; i < sizeof(req) / sizeof(req[0]); i++)
        if (!dlsym(h, req[i]) && mo < sizeof(missing) - 64)
            mo += (size_t)snprintf(missing + mo, sizeof(missing) - mo, "%s%s", mo ? " " : "", req[i]);
    for (size_t i = 0; opt[i]; i++)
        if (!dlsym(h, opt[i]) && ao < sizeof(absent) - 64)
            ao += (size_t)snprintf(absent + ao, sizeof(absent) - ao, "%s%s", ao ? " " : "", opt[i]);
    fact("probe.nccl.missing", mo ? missing : "none", "  entry points", "%s%s%s%s",
         mo ? "missing (the library cannot use this NCCL): " : "all the library needs are present", missing,
         ao ? "; absent, done with send/recv instead: " : "", absent);
    fact("probe.nccl.optional_absent", ao ? absent : "none", NULL, "%s", absent);
}

static void print_probe(void)
{
    section("Run-time probe");
    probe_mpi();
    probe_hwloc();
    probe_cuda();
    probe_nccl();
    if (topo) hwloc_topology_destroy(topo);
    topo = NULL;
}

/* ---- main ----------------------------------------------------------------------------------- */

enum { O_BUILD = 1, O_FUNCS = 2, O_PROBE = 4, O_CONFIG = 8, O_MARKDOWN = 16 };

static int bad_option(const char *what)
{
    fprintf(stderr, "ncclmpi_info: unknown option '%s'\nTry 'ncclmpi_info --help'.\n", what);
    return 2;
}

int main(int argc, char **argv)
{
    int what = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help")) { fputs(usage_text, stdout); return 0; }
        if (!strcmp(a, "--version")) { printf("ncclmpi %s (NCCL %s headers)\n", PACKAGE_VERSION, NM_NCCL_BUILD_VERSION); return 0; }
        if (!strcmp(a, "--build") || !strcmp(a, "--config")) what |= O_BUILD;
        else if (!strcmp(a, "--functions")) what |= O_FUNCS;
        else if (!strcmp(a, "--probe")) what |= O_PROBE;
        else if (!strcmp(a, "--settings")) what |= O_CONFIG;
        else if (!strcmp(a, "--markdown")) what |= O_MARKDOWN;
        else if (!strcmp(a, "--all")) what |= O_BUILD | O_FUNCS | O_PROBE | O_CONFIG;
        else if (!strcmp(a, "--parsable") || !strcmp(a, "--parseable")) parsable = 1;
        else if (a[0] == '-' && a[1] && a[1] != '-') {
            for (const char *c = a + 1; *c; c++) switch (*c) {
                case 'h': fputs(usage_text, stdout); return 0;
                case 'V': printf("ncclmpi %s (NCCL %s headers)\n", PACKAGE_VERSION, NM_NCCL_BUILD_VERSION); return 0;
                case 'b':
                case 'c': what |= O_BUILD; break;
                case 'f': what |= O_FUNCS; break;
                case 'p': what |= O_PROBE; break;
                case 's': what |= O_CONFIG; break;
                case 'm': what |= O_MARKDOWN; break;
                case 'a': what |= O_BUILD | O_FUNCS | O_PROBE | O_CONFIG; break;
                default: {
                    char o[3] = {'-', *c, 0};
                    return bad_option(o);
                }
                }
        } else
            return bad_option(a);
    }
    if (what & O_MARKDOWN) {
        nm_config_print(stdout, 1);
        return 0;
    }
    if (!what) what = O_BUILD;
    if (what & (O_PROBE | O_CONFIG)) nm_config_load(); /* warns about invalid and unknown NCCLMPI_* */
    if (parsable) printf("version:%s\n", PACKAGE_VERSION);
    else printf("ncclmpi %s\n", PACKAGE_VERSION);
    sections = 1;
    if (what & O_BUILD) print_build();
    if (what & O_FUNCS) print_functions();
    if (what & O_PROBE) print_probe();
    if (what & O_CONFIG) {
        if (parsable) nm_config_print_parsable(stdout);
        else {
            section("Settings (NCCLMPI_*; doc/config.md)");
            nm_config_print(stdout, 0);
        }
    }
    if (!parsable && what == O_BUILD)
        printf("\nMore: ncclmpi_info -p (probe this machine), -s (settings), -a (everything), --help\n");
    fflush(stdout);
    return 0;
}
