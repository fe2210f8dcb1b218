/* ncclmpi: configuration, parsed once from NCCLMPI_* (src/util/config.def). */
#ifndef NM_UTIL_CONFIG_H
#define NM_UTIL_CONFIG_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    NM_CFG_BOOL, NM_CFG_INT, NM_CFG_SIZE, NM_CFG_STR, NM_CFG_LEVEL, NM_CFG_ENUM, NM_CFG_LIST, NM_CFG_STATS
} nm_cfg_type_t;

/* NCCLMPI_STATS */
enum { NM_STATS_OFF = 0, NM_STATS_SUMMARY = 1, NM_STATS_RANK = 2, NM_STATS_FILE = 3 };

typedef struct nm_config {
#define NM_CFG(name, type, def, accept, doc) NM_CFG_FIELD_##type(name)
#define NM_CFG_FIELD_BOOL(name) int name;
#define NM_CFG_FIELD_INT(name) long name;
#define NM_CFG_FIELD_SIZE(name) size_t name;
#define NM_CFG_FIELD_STR(name) const char *name;
#define NM_CFG_FIELD_LEVEL(name) int name;
#define NM_CFG_FIELD_ENUM(name) const char *name;
#define NM_CFG_FIELD_LIST(name) const char *name;
#define NM_CFG_FIELD_STATS(name) int name;
#include "util/config.def"
#undef NM_CFG
    const char *stats_file; /* NCCLMPI_STATS=file:PATH: PATH (else NULL) */
} nm_config_t;

typedef struct nm_cfg_row {
    const char *name; /* without the NCCLMPI_ prefix */
    nm_cfg_type_t type;
    const char *def;
    const char *accept; /* config.def's ACCEPT column */
    const char *doc;
    size_t offset;      /* of the field in nm_config_t */
} nm_cfg_row_t;

/* A variable read by the scripts (NM_CFG_SCRIPT rows), not by the library. */
typedef struct nm_cfg_script_row {
    const char *name;
    const char *def;
    const char *reader;
    const char *doc;
} nm_cfg_script_row_t;

extern nm_config_t nm_cfg;
extern const nm_cfg_row_t nm_cfg_rows[];
extern const int nm_cfg_nrows;
extern const nm_cfg_script_row_t nm_cfg_script_rows[];
extern const int nm_cfg_script_nrows;

/* Parse the environment into nm_cfg, once; later calls do nothing. Invalid values and unknown
 * NCCLMPI_* names warn on stderr (unless NCCLMPI_LOG is NONE or ERROR); defaults are kept. */
void nm_config_load(void);
/* Another component's variable that a decision of ncclmpi's depends on (CUDA_VISIBLE_DEVICES for
 * NCCLMPI_P2P_ENVELOPE=auto, NCCL_RUNTIME_CONNECT for NCCLMPI_CONNECT), read here like the settings;
 * NULL when it is not set. */
const char *nm_config_foreign(const char *name);
/* Whether setting `name` (without NCCLMPI_) was given a valid value in the environment (else
 * nm_cfg holds its default, which a derived limit may then adjust). */
int nm_cfg_from_env(const char *name);
/* Reset nm_cfg to the defaults and parse `envp` (NULL: the process environment); returns the
 * number of warnings. nm_config_load's worker; unit tests call it directly. */
int nm_config_parse(char *const *envp);
/* Print every setting with its type, default, accepted values, current value and meaning, as
 * `ncclmpi_info -s` does; markdown: the whole of doc/config.md (`ncclmpi_info -m`). */
void nm_config_print(void *file, int markdown);
/* Print "setting:NCCLMPI_NAME:FIELD:value" lines (`ncclmpi_info -s --parsable`). */
void nm_config_print_parsable(void *file);

/* Parse helpers, exposed for unit tests. Return 0 on success, -1 if `s` is not valid. */
int nm_cfg_parse_bool(const char *s, int *out);
int nm_cfg_parse_size(const char *s, size_t *out);
int nm_cfg_parse_level(const char *s, int *out);
/* One value for `row`, checked against its type and ACCEPT, stored in cfg's field of the row (and
 * cfg->stats_file); nothing is stored when it is invalid. A STR field keeps `s` itself. */
int nm_cfg_parse_value(const nm_cfg_row_t *row, const char *s, nm_config_t *cfg);
/* The accepted values of `row` in words ("an integer >= 0", "one of: device, host"). */
const char *nm_cfg_accepted(const nm_cfg_row_t *row, char *buf, size_t n);
/* The row named `name` (without NCCLMPI_), or NULL. */
const nm_cfg_row_t *nm_cfg_find(const char *name);
/* The known name (library or script variable, without NCCLMPI_) closest to `name` by edit
 * distance, case-insensitive; its distance in *dist when dist is not NULL. */
const char *nm_cfg_closest(const char *name, int *dist);
/* Edit distance (Levenshtein, case-insensitive) of two strings of up to 63 characters; longer
 * strings are compared on their first 63. */
int nm_cfg_edit_distance(const char *a, const char *b);

#ifdef __cplusplus
}
#endif
#endif
