/* ncclmpi: configuration, parsed once from NCCLMPI_* (src/util/config.def). */
#ifndef NM_UTIL_CONFIG_H
#define NM_UTIL_CONFIG_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

typedef enum { NM_CFG_BOOL, NM_CFG_INT, NM_CFG_SIZE, NM_CFG_STR, NM_CFG_LEVEL } nm_cfg_type_t;

typedef struct nm_config {
#define NM_CFG(name, type, def, doc) NM_CFG_FIELD_##type(name)
#define NM_CFG_FIELD_BOOL(name) int name;
#define NM_CFG_FIELD_INT(name) long name;
#define NM_CFG_FIELD_SIZE(name) size_t name;
#define NM_CFG_FIELD_STR(name) const char *name;
#define NM_CFG_FIELD_LEVEL(name) int name;
#include "util/config.def"
#undef NM_CFG
} nm_config_t;

typedef struct nm_cfg_row {
    const char *name; /* without the NCCLMPI_ prefix */
    nm_cfg_type_t type;
    const char *def;
    const char *doc;
} nm_cfg_row_t;

extern nm_config_t nm_cfg;
extern const nm_cfg_row_t nm_cfg_rows[];
extern const int nm_cfg_nrows;

/* Parse the environment into nm_cfg; idempotent. Invalid values warn and keep the default. */
void nm_config_load(void);
/* Print the table (name, type, default, current value, doc), as `ncclmpi_info -c` does. */
void nm_config_print(void *file, int markdown);
/* Parse helpers, exposed for unit tests. Return 0 on success. */
int nm_cfg_parse_bool(const char *s, int *out);
int nm_cfg_parse_size(const char *s, size_t *out);
int nm_cfg_parse_level(const char *s, int *out);

#ifdef __cplusplus
}
#endif
#endif
