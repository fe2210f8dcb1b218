/* ncclmpi: NCCLMPI_* environment parsing, driven by config.def. */
#include "nm_build.h"
#include "util/config.h"
#include "util/log.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

nm_config_t nm_cfg;

const nm_cfg_row_t nm_cfg_rows[] = {
#define NM_CFG(name, type, def, doc) {#name, NM_CFG_##type, def, doc},
#include "util/config.def"
#undef NM_CFG
};
const int nm_cfg_nrows = sizeof(nm_cfg_rows) / sizeof(nm_cfg_rows[0]);

static const char *const level_names[] = {"NONE", "ERROR", "WARN", "INFO", "DEBUG", "TRACE"};

int nm_cfg_parse_bool(const char *s, int *out)
{
    if (!strcasecmp(s, "1") || !strcasecmp(s, "y") || !strcasecmp(s, "yes") || !strcasecmp(s, "on") ||
        !strcasecmp(s, "true")) { *out = 1; return 0; }
    if (!strcasecmp(s, "0") || !strcasecmp(s, "n") || !strcasecmp(s, "no") || !strcasecmp(s, "off") ||
        !strcasecmp(s, "false")) { *out = 0; return 0; }
    return -1;
}

int nm_cfg_parse_size(const char *s, size_t *out)
{
    char *end;
    if (!isdigit((unsigned char)*s)) return -1;
    unsigned long long v = strtoull(s, &end, 10);
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    case 0: break;
    default: return -1;
    }
    if ((*end == 'B' || *end == 'b') && shift) end++;
    if (*end) return -1;
    if (shift && v > (~0ULL >> shift)) return -1;
    *out = (size_t)(v << shift);
    return 0;
}

int nm_cfg_parse_level(const char *s, int *out)
{
    for (int i = 0; i < (int)(sizeof(level_names) / sizeof(level_names[0])); i++)
        if (!strcasecmp(s, level_names[i])) { *out = i; return 0; }
    return -1;
}

static int parse_int(const char *s, long *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end) return -1;
    *out = v;
    return 0;
}

/* Store value text `s` into the field of row i; -1 if it does not parse. */
static int set_field(int i, const char *s)
{
    int idx = 0, rc = 0;
#define NM_CFG(name, type, def, doc) if (idx++ == i) rc = SET_##type(nm_cfg.name, s);
#define SET_BOOL(f, s) nm_cfg_parse_bool(s, &(f))
#define SET_INT(f, s) parse_int(s, &(f))
#define SET_SIZE(f, s) nm_cfg_parse_size(s, &(f))
#define SET_STR(f, s) ((f) = (s), 0)
#define SET_LEVEL(f, s) nm_cfg_parse_level(s, &(f))
#include "util/config.def"
#undef NM_CFG
    return rc;
}

void nm_config_load(void)
{
    static int loaded;
    if (loaded) return;
    loaded = 1;
    for (int i = 0; i < nm_cfg_nrows; i++) set_field(i, nm_cfg_rows[i].def);
    for (int i = 0; i < nm_cfg_nrows; i++) {
        char var[64];
        snprintf(var, sizeof(var), "NCCLMPI_%s", nm_cfg_rows[i].name);
        const char *v = getenv(var);
        if (!v) continue;
        if (set_field(i, v) != 0) {
            set_field(i, nm_cfg_rows[i].def);
            fprintf(stderr, "[ncclmpi] WARN %s=\"%s\" is not a valid %s; using the default \"%s\"\n", var, v,
                    nm_cfg_rows[i].type == NM_CFG_BOOL ? "boolean (0/1)" :
                    nm_cfg_rows[i].type == NM_CFG_SIZE ? "size (e.g. 4M)" :
                    nm_cfg_rows[i].type == NM_CFG_LEVEL ? "level (NONE..TRACE)" : "value",
                    nm_cfg_rows[i].def);
        }
    }
    nm_log_level = nm_cfg.LOG;
    nm_log_mask = nm_log_parse_mask(nm_cfg.LOG_SUBSYS);
}

static void value_str(int i, char *buf, size_t n)
{
    int idx = 0;
#define NM_CFG(name, type, def, doc) if (idx++ == i) STR_##type(nm_cfg.name);
#define STR_BOOL(f) snprintf(buf, n, "%d", f)
#define STR_INT(f) snprintf(buf, n, "%ld", f)
#define STR_SIZE(f) snprintf(buf, n, "%zu", f)
#define STR_STR(f) snprintf(buf, n, "%s", (f) ? (f) : "")
#define STR_LEVEL(f) snprintf(buf, n, "%s", level_names[f])
#include "util/config.def"
#undef NM_CFG
}

void nm_config_print(void *file, int markdown)
{
    FILE *f = (FILE *)file;
    static const char *const tnames[] = {"bool", "int", "size", "string", "level"};
    nm_config_load();
    if (markdown) {
        fprintf(f, "| Variable | Type | Default | Meaning |\n|---|---|---|---|\n");
        for (int i = 0; i < nm_cfg_nrows; i++)
            fprintf(f, "| `NCCLMPI_%s` | %s | `%s` | %s |\n", nm_cfg_rows[i].name, tnames[nm_cfg_rows[i].type],
                    nm_cfg_rows[i].def, nm_cfg_rows[i].doc);
        return;
    }
    for (int i = 0; i < nm_cfg_nrows; i++) {
        char val[256];
        value_str(i, val, sizeof(val));
        fprintf(f, "NCCLMPI_%s (%s, default \"%s\", current \"%s\")\n    %s\n", nm_cfg_rows[i].name,
                tnames[nm_cfg_rows[i].type], nm_cfg_rows[i].def, val, nm_cfg_rows[i].doc);
    }
}
