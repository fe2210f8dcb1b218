# Spack recipe for ncclmpi. Use it from a local repository:
#
#     spack repo create ~/spack-ncclmpi          # once (older Spack: a repo.yaml with namespace)
#     mkdir -p ~/spack-ncclmpi/packages/ncclmpi
#     cp contrib/spack/package.py ~/spack-ncclmpi/packages/ncclmpi/
#     spack repo add ~/spack-ncclmpi
#     spack install ncclmpi ^openmpi@4.1
#
# CUDA and NCCL come from Spack (the default), from externals declared in packages.yaml (the
# usual way to use a system CUDA), or from any installation prefix given with the variants:
#
#     spack install ncclmpi cuda_dir=/usr/local/cuda nccl_dir=/usr/local/cuda
#
# Only cuda.h and nccl.h are used at build time: the library loads the CUDA driver and NCCL at
# run time (the NCCL path found here is its default; NCCLMPI_NCCL_LIB overrides it).

from spack.package import *


class Ncclmpi(AutotoolsPackage):
    """PMPI interposition library that runs MPI calls on CUDA device buffers over NCCL (and
    host buffers on the real MPI), for MPIs that are not CUDA-aware. Preload it into an
    unmodified MPI program (ncclmpi_exec) or link it before -lmpi."""

    homepage = "https://github.com/ncclmpi/ncclmpi"
    git = "https://github.com/ncclmpi/ncclmpi.git"
    url = "https://github.com/ncclmpi/ncclmpi/releases/download/v0.1.0/ncclmpi-0.1.0.tar.gz"

    license("BSD-3-Clause")

    version("main", branch="main")
    # A release tarball (made with `make dist`) is added with its checksum:
    #     spack checksum ncclmpi 0.1.0

    variant(
        "cuda_dir",
        default="spack",
        values=str,
        multi=False,
        description="CUDA toolkit whose cuda.h to build against: 'spack' (the cuda dependency) "
        "or an installation prefix",
    )
    variant(
        "nccl_dir",
        default="spack",
        values=str,
        multi=False,
        description="NCCL whose nccl.h to build against and whose libnccl.so.2 to load by default: "
        "'spack' (the nccl dependency) or an installation prefix",
    )
    variant("fortran", default=True, description="Build the Fortran tests of make check")

    # language virtuals (Spack >= 0.23); delete these three lines for an older Spack
    depends_on("c", type="build")
    depends_on("cxx", type="build")
    depends_on("fortran", type="build", when="+fortran")

    # built and tested with Open MPI 4.1 (configure accepts another MPI, untested)
    depends_on("mpi")
    depends_on("hwloc@2:")
    depends_on("cuda@11:", when="cuda_dir=spack")
    depends_on("nccl@2.18:", when="nccl_dir=spack")

    # the wrappers are generated at build time; a git checkout has no configure yet
    depends_on("python@3.5:", type="build")
    depends_on("pkgconfig", type="build")
    depends_on("autoconf", type="build", when="@main")
    depends_on("automake", type="build", when="@main")
    depends_on("libtool", type="build", when="@main")
    depends_on("m4", type="build", when="@main")
    # make check runs the tests through CTest
    depends_on("cmake", type="test")

    def autoreconf(self, spec, prefix):
        Executable("./autogen.sh")()

    def _prefix_of(self, variant, dependency):
        value = self.spec.variants[variant].value
        return self.spec[dependency].prefix if value == "spack" else value

    def configure_args(self):
        spec = self.spec
        args = [
            # the MPI compiler wrappers decide which MPI is wrapped
            "CC={0}".format(spec["mpi"].mpicc),
            "CXX={0}".format(spec["mpi"].mpicxx),
            "--with-mpi={0}".format(spec["mpi"].prefix),
            "--with-hwloc={0}".format(spec["hwloc"].prefix),
            "--with-cuda={0}".format(self._prefix_of("cuda_dir", "cuda")),
            "--with-nccl={0}".format(self._prefix_of("nccl_dir", "nccl")),
        ]
        if spec.satisfies("~fortran"):
            args.append("--without-fortran")
        return args
