/* ncclmpi: NCCLMPI_* environment parsing, driven by config.def. */
#include "nm_build.h"
#include "util/config.h"
#include "util/log.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

extern char **environ;

nm_config_t nm_cfg;

const nm_cfg_row_t nm_cfg_rows[] = {
#define NM_CFG(name, type, def, accept, doc) {#name, NM_CFG_##type, def, accept, doc, offsetof(nm_config_t, name)},
#include "util/config.def"
#undef NM_CFG
};
const int nm_cfg_nrows = sizeof(nm_cfg_rows) / sizeof(nm_cfg_rows[0]);

const nm_cfg_script_row_t nm_cfg_script_rows[] = {
#define NM_CFG(name, type, def, accept, doc)
#define NM_CFG_SCRIPT(name, def, reader, doc) {#name, def, reader, doc},
#include "util/config.def"
#undef NM_CFG_SCRIPT
#undef NM_CFG
};
const int nm_cfg_script_nrows = sizeof(nm_cfg_script_rows) / sizeof(nm_cfg_script_rows[0]);

static const char *const type_names[] = {"bool", "int", "size", "string", "level", "enum", "list", "stats"};
static unsigned char from_env[sizeof(nm_cfg_rows) / sizeof(nm_cfg_rows[0])];

/* ---- value parsers ------------------------------------------------------------------------ */

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
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE) return -1;
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
    if ((v << shift) > (unsigned long long)(size_t)-1) return -1;
    *out = (size_t)(v << shift);
    return 0;
}

static int parse_long(const char *s, long *out)
{
    char *end;
    if (!isdigit((unsigned char)*s) && !((*s == '-' || *s == '+') && isdigit((unsigned char)s[1]))) return -1;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno == ERANGE || *end) return -1;
    *out = v;
    return 0;
}

/* Index of `s` among the words of `list` separated by `sep` (any case), or -1. */
static int word_index(const char *list, char sep, const char *s, size_t slen)
{
    int i = 0;
    for (const char *w = list; *w; i++) {
        const char *e = strchr(w, sep);
        size_t n = e ? (size_t)(e - w) : strlen(w);
        if (n == slen && !strncasecmp(w, s, n)) return i;
        if (!e) break;
        w = e + 1;
    }
    return -1;
}

/* The i-th word of `list`, copied into buf. */
static const char *word_at(const char *list, char sep, int i, char *buf, size_t n)
{
    const char *w = list;
    for (; i > 0 && w; i--) {
        w = strchr(w, sep);
        if (w) w++;
    }
    if (!w) return "";
    const char *e = strchr(w, sep);
    size_t len = e ? (size_t)(e - w) : strlen(w);
    if (len >= n) len = n - 1;
    memcpy(buf, w, len);
    buf[len] = 0;
    return buf;
}

static const char level_words[] = "NONE|ERROR|WARN|INFO|DEBUG|TRACE";

int nm_cfg_parse_level(const char *s, int *out)
{
    int i = word_index(level_words, '|', s, strlen(s));
    if (i < 0) return -1;
    *out = i;
    return 0;
}

/* ACCEPT "MIN.." or "MIN..MAX" of an INT or SIZE row; returns which bounds exist (1 min, 2 max). */
static int range_of(const nm_cfg_row_t *row, long *lmin, long *lmax, size_t *zmin, size_t *zmax)
{
    const char *dots = row->accept ? strstr(row->accept, "..") : NULL;
    if (!dots) return 0;
    char lo[32] = "", hi[32] = "";
    size_t n = (size_t)(dots - row->accept);
    if (n < sizeof(lo)) { memcpy(lo, row->accept, n); lo[n] = 0; }
    snprintf(hi, sizeof(hi), "%s", dots + 2);
    int have = 0;
    if (row->type == NM_CFG_INT) {
        if (*lo && parse_long(lo, lmin) == 0) have |= 1;
        if (*hi && parse_long(hi, lmax) == 0) have |= 2;
    } else {
        if (*lo && nm_cfg_parse_size(lo, zmin) == 0) have |= 1;
        if (*hi && nm_cfg_parse_size(hi, zmax) == 0) have |= 2;
    }
    return have;
}


static int parse_stats(const char *s, int *mode, const char **path)
{
    int b;
    if (nm_cfg_parse_bool(s, &b) == 0) { *mode = b ? NM_STATS_SUMMARY : NM_STATS_OFF; *path = NULL; return 0; }
    if (!strcasecmp(s, "summary")) { *mode = NM_STATS_SUMMARY; *path = NULL; return 0; }
    if (!strcasecmp(s, "rank")) { *mode = NM_STATS_RANK; *path = NULL; return 0; }
    if (!strncasecmp(s, "file:", 5) && s[5]) { *mode = NM_STATS_FILE; *path = s + 5; return 0; }
    return -1;
}

int nm_cfg_parse_value(const nm_cfg_row_t *row, const char *s, nm_config_t *cfg)
{
    void *field = (char *)cfg + row->offset;
    if (!s) return -1;
    switch (row->type) {
    case NM_CFG_BOOL: return nm_cfg_parse_bool(s, (int *)field);
    case NM_CFG_INT: {
        long v, lo = 0, hi = 0;
        size_t zl, zh;
        if (parse_long(s, &v)) return -1;
        int have = range_of(row, &lo, &hi, &zl, &zh);
        if (((have & 1) && v < lo) || ((have & 2) && v > hi)) return -1;
        *(long *)field = v;
        return 0;
    }
    case NM_CFG_SIZE: {
        size_t v, lo = 0, hi = 0;
        long ll, lh;
        if (nm_cfg_parse_size(s, &v)) return -1;
        int have = range_of(row, &ll, &lh, &lo, &hi);
        if (((have & 1) && v < lo) || ((have & 2) && v > hi)) return -1;
        *(size_t *)field = v;
        return 0;
    }
    case NM_CFG_STR: *(const char **)field = s; return 0;
    case NM_CFG_LEVEL: {
        int i = word_index(row->accept, '|', s, strlen(s));
        if (i < 0) return -1;
        *(int *)field = i;
        return 0;
    }
    case NM_CFG_ENUM: {
        int i = word_index(row->accept, '|', s, strlen(s));
        if (i < 0) return -1;
        char w[64];
        char *d = strdup(word_at(row->accept, '|', i, w, sizeof(w)));
        if (!d) return -1;
        *(const char **)field = d;
        return 0;
    }
    case NM_CFG_LIST: {
        /* comma list of ACCEPT words, blanks around them allowed; stored upper case, no blanks */
        size_t n = strlen(s);
        char *out = (char *)malloc(n + 1), *o = out;
        if (!out) return -1;
        int words = 0;
        for (const char *p = s;;) {
            while (*p == ' ' || *p == '\t') p++;
            const char *e = p;
            while (*e && *e != ',') e++;
            const char *t = e;
            while (t > p && (t[-1] == ' ' || t[-1] == '\t')) t--;
            if (t == p || word_index(row->accept, ',', p, (size_t)(t - p)) < 0) { free(out); return -1; }
            if (words++) *o++ = ',';
            for (const char *c = p; c < t; c++) *o++ = (char)toupper((unsigned char)*c);
            if (!*e) break;
            p = e + 1;
        }
        *o = 0;
        *(const char **)field = out;
        return 0;
    }
    case NM_CFG_STATS: {
        int mode;
        const char *path;
        if (parse_stats(s, &mode, &path)) return -1;
        *(int *)field = mode;
        cfg->stats_file = path;
        return 0;
    }
    }
    return -1;
}

const char *nm_cfg_accepted(const nm_cfg_row_t *row, char *buf, size_t n)
{
    long lmin = 0, lmax = 0;
    size_t zmin, zmax;
    char lo[32], hi[32];
    const char *a = row->accept ? row->accept : "";
    int have;
    switch (row->type) {
    case NM_CFG_BOOL: snprintf(buf, n, "0 or 1 (also no/yes, off/on, false/true)"); break;
    case NM_CFG_INT:
    case NM_CFG_SIZE: {
        have = range_of(row, &lmin, &lmax, &zmin, &zmax);
        const char *what = row->type == NM_CFG_INT ? "an integer" : "a size";
        const char *unit = row->type == NM_CFG_INT ? "" : " (bytes, or with a K, M or G suffix)";
        const char *dots = strstr(a, "..");
        snprintf(lo, sizeof(lo), "%.*s", dots ? (int)(dots - a) : 0, a);
        snprintf(hi, sizeof(hi), "%s", dots ? dots + 2 : "");
        if (have == 3) snprintf(buf, n, "%s from %s to %s%s", what, lo, hi, unit);
        else if (have == 1) snprintf(buf, n, "%s >= %s%s", what, lo, unit);
        else if (have == 2) snprintf(buf, n, "%s <= %s%s", what, hi, unit);
        else snprintf(buf, n, "%s%s", what, unit);
        break;
    }
    case NM_CFG_STR: snprintf(buf, n, "any text"); break;
    case NM_CFG_LEVEL:
    case NM_CFG_ENUM:
    case NM_CFG_STATS:
    case NM_CFG_LIST: {
        char sep = row->type == NM_CFG_LIST ? ',' : '|';
        size_t o = (size_t)snprintf(buf, n, "%s", row->type == NM_CFG_LIST ? "a comma list of " : "one of ");
        for (const char *p = a; *p && o + 3 < n; p++) {
            if (*p == sep) { buf[o++] = ','; buf[o++] = ' '; }
            else buf[o++] = *p;
        }
        buf[o < n ? o : n - 1] = 0;
        if (row->type != NM_CFG_STATS && o + 1 < n) snprintf(buf + o, n - o, " (any case)");
        break;
    }
    }
    return buf;
}

const nm_cfg_row_t *nm_cfg_find(const char *name)
{
    for (int i = 0; i < nm_cfg_nrows; i++)
        if (!strcmp(nm_cfg_rows[i].name, name)) return &nm_cfg_rows[i];
    return NULL;
}

static int script_find(const char *name)
{
    for (int i = 0; i < nm_cfg_script_nrows; i++)
        if (!strcmp(nm_cfg_script_rows[i].name, name)) return i;
    return -1;
}

int nm_cfg_edit_distance(const char *a, const char *b)
{
    enum { L = 63 };
    int la = (int)strnlen(a, L), lb = (int)strnlen(b, L);
    int prev[L + 1], cur[L + 1];
    for (int j = 0; j <= lb; j++) prev[j] = j;
    for (int i = 1; i <= la; i++) {
        cur[0] = i;
        for (int j = 1; j <= lb; j++) {
            int sub = prev[j - 1] + (toupper((unsigned char)a[i - 1]) != toupper((unsigned char)b[j - 1]));
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, sizeof(int) * (size_t)(lb + 1));
    }
    return prev[lb];
}

const char *nm_cfg_closest(const char *name, int *dist)
{
    const char *best = NULL;
    int bd = 1 << 30;
    for (int i = 0; i < nm_cfg_nrows + nm_cfg_script_nrows; i++) {
        const char *k = i < nm_cfg_nrows ? nm_cfg_rows[i].name : nm_cfg_script_rows[i - nm_cfg_nrows].name;
        int d = nm_cfg_edit_distance(name, k);
        if (d < bd) { bd = d; best = k; }
    }
    if (dist) *dist = bd;
    return best;
}

/* ---- loading ------------------------------------------------------------------------------ */

#define NM_CFG_MAX_WARN 32
static char *warn_text[NM_CFG_MAX_WARN];
static int warn_count;

static void warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void warn(const char *fmt, ...)
{
    char buf[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (warn_count < NM_CFG_MAX_WARN) warn_text[warn_count] = strdup(buf);
    warn_count++;
}

const char *nm_config_foreign(const char *name) { return getenv(name); }

int nm_cfg_from_env(const char *name)
{
    const nm_cfg_row_t *row = nm_cfg_find(name);
    return row && from_env[row - nm_cfg_rows];
}

int nm_config_parse(char *const *envp)
{
    if (!envp) envp = environ;
    memset(&nm_cfg, 0, sizeof(nm_cfg));
    memset(from_env, 0, sizeof(from_env));
    for (int i = 0; i < warn_count && i < NM_CFG_MAX_WARN; i++) free(warn_text[i]);
    warn_count = 0;
    for (int i = 0; i < nm_cfg_nrows; i++)
        if (nm_cfg_parse_value(&nm_cfg_rows[i], nm_cfg_rows[i].def, &nm_cfg) != 0)
            warn("internal: the default \"%s\" of NCCLMPI_%s does not parse", nm_cfg_rows[i].def, nm_cfg_rows[i].name);
    for (char *const *e = envp; e && *e; e++) {
        if (strncmp(*e, "NCCLMPI_", 8)) continue;
        const char *eq = strchr(*e, '=');
        if (!eq) continue;
        char name[128];
        snprintf(name, sizeof(name), "%.*s", (int)(eq - *e - 8), *e + 8);
        const char *val = eq + 1;
        const nm_cfg_row_t *row = nm_cfg_find(name);
        if (row) {
            char *copy = strdup(val);
            if (nm_cfg_parse_value(row, copy, &nm_cfg) == 0) {
                from_env[row - nm_cfg_rows] = 1;
                if (row->type != NM_CFG_STR && row->type != NM_CFG_STATS) free(copy); /* not kept */
                continue;
            }
            char acc[256];
            warn("NCCLMPI_%s=\"%s\" is not valid; using the default \"%s\". Accepted: %s.", name, val, row->def,
                 nm_cfg_accepted(row, acc, sizeof(acc)));
            free(copy);
            nm_cfg_parse_value(row, row->def, &nm_cfg);
            continue;
        }
        if (script_find(name) >= 0) continue;
        int d;
        const char *best = nm_cfg_closest(name, &d);
        int len = (int)strlen(name);
        warn("NCCLMPI_%s is not an ncclmpi setting; ignored (%s NCCLMPI_%s? `ncclmpi_info -s` lists them all)", name,
             d <= (len / 3 > 1 ? len / 3 : 1) ? "did you mean" : "the closest is", best);
    }
    return warn_count;
}

void nm_config_load(void)
{
    static int loaded;
    if (loaded) return;
    loaded = 1;
    nm_config_parse(environ);
    nm_log_level = nm_cfg.LOG;
    nm_log_mask = nm_log_parse_mask(nm_cfg.LOG_SUBSYS);
    /* configuration warnings show whatever NCCLMPI_LOG_SUBSYS says, unless the level hides warnings */
    for (int i = 0; i < warn_count && i < NM_CFG_MAX_WARN; i++)
        if (nm_log_level >= NM_LOG_WARN && warn_text[i])
            nm_log_write(NM_LOG_WARN, NM_SS_CONFIG, __FILE__, __LINE__, "%s", warn_text[i]);
    if (warn_count > NM_CFG_MAX_WARN && nm_log_level >= NM_LOG_WARN)
        nm_log_write(NM_LOG_WARN, NM_SS_CONFIG, __FILE__, __LINE__, "... and %d more configuration warnings",
                     warn_count - NM_CFG_MAX_WARN);
}

/* ---- printing ----------------------------------------------------------------------------- */

static void value_str(const nm_cfg_row_t *row, char *buf, size_t n)
{
    const void *f = (const char *)&nm_cfg + row->offset;
    switch (row->type) {
    case NM_CFG_BOOL: snprintf(buf, n, "%d", *(const int *)f); break;
    case NM_CFG_INT: snprintf(buf, n, "%ld", *(const long *)f); break;
    case NM_CFG_SIZE: {
        size_t v = *(const size_t *)f;
        if (v && !(v & ((1u << 30) - 1))) snprintf(buf, n, "%zuG", v >> 30);
        else if (v && !(v & ((1u << 20) - 1))) snprintf(buf, n, "%zuM", v >> 20);
        else if (v && !(v & ((1u << 10) - 1))) snprintf(buf, n, "%zuK", v >> 10);
        else snprintf(buf, n, "%zu", v);
        break;
    }
    case NM_CFG_STR:
    case NM_CFG_ENUM:
    case NM_CFG_LIST: snprintf(buf, n, "%s", *(const char *const *)f ? *(const char *const *)f : ""); break;
    case NM_CFG_LEVEL: {
        char w[32];
        snprintf(buf, n, "%s", word_at(row->accept, '|', *(const int *)f, w, sizeof(w)));
        break;
    }
    case NM_CFG_STATS: {
        static const char *const modes[] = {"0", "summary", "rank", "file"};
        int m = *(const int *)f;
        if (m == NM_STATS_FILE) snprintf(buf, n, "file:%s", nm_cfg.stats_file ? nm_cfg.stats_file : "");
        else snprintf(buf, n, "%s", modes[m >= 0 && m < 3 ? m : 0]);
        break;
    }
    }
}

/* Word-wrapped `text`, each line indented by `indent` spaces, at most `width` columns. */
static void print_wrapped(FILE *f, const char *text, int indent, int width)
{
    const char *p = text;
    while (*p) {
        int room = width - indent, len = (int)strlen(p);
        int cut = len;
        if (len > room) {
            cut = room;
            while (cut > 0 && p[cut] != ' ') cut--;
            if (cut == 0) { cut = room; while (p[cut] && p[cut] != ' ') cut++; }
        }
        fprintf(f, "%*s%.*s\n", indent, "", cut, p);
        p += cut;
        while (*p == ' ') p++;
    }
}

/* Markdown table cell: '|' escaped. */
static void md_cell(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '|') fputc('\\', f);
        fputc(*s, f);
    }
}

static const char md_intro[] =
    "# ncclmpi configuration\n"
    "\n"
    "Every setting is an environment variable, read once when the library loads. This page is the\n"
    "output of `ncclmpi_info -m` (made from `src/util/config.def`); `ncclmpi_info -s` prints the same\n"
    "settings with their current values.\n"
    "\n"
    "Values are checked. Booleans take 0/1, no/yes, off/on or false/true; sizes are bytes or take a\n"
    "K, M or G suffix; words are matched in any case. An invalid value is reported on stderr with the\n"
    "variable, the value and the accepted values, and the default is used instead. An `NCCLMPI_*`\n"
    "variable that is not listed here (a typo) is reported with the closest known name. Both warnings\n"
    "are printed by every process before `MPI_Init`; `NCCLMPI_LOG=ERROR` silences them.\n"
    "\n";

/* A variable only the test programs read (reader test/...): in doc/config.md, not in ncclmpi_info's
 * lists, which are for users. */
static int script_test_only(const nm_cfg_script_row_t *r)
{
    return !strncmp(r->reader, "test", 4);
}

void nm_config_print(void *file, int markdown)
{
    FILE *f = (FILE *)file;
    char acc[512], val[512];
    nm_config_load();
    if (markdown) {
        fputs(md_intro, f);
        fprintf(f, "| Variable | Type | Default | Accepted | Meaning |\n|---|---|---|---|---|\n");
        for (int i = 0; i < nm_cfg_nrows; i++) {
            const nm_cfg_row_t *r = &nm_cfg_rows[i];
            fprintf(f, "| `NCCLMPI_%s` | %s | %s%s%s | ", r->name, type_names[r->type], *r->def ? "`" : "",
                    *r->def ? r->def : "(empty)", *r->def ? "`" : "");
            md_cell(f, nm_cfg_accepted(r, acc, sizeof(acc)));
            fputs(" | ", f);
            md_cell(f, r->doc);
            fputs(" |\n", f);
        }
        fprintf(f, "\n## Read by the scripts\n\n"
                   "The scripts and test programs of ncclmpi read these; the library itself ignores them (and\n"
                   "does not report them as unknown).\n\n"
                   "| Variable | Read by | Default | Meaning |\n|---|---|---|---|\n");
        for (int i = 0; i < nm_cfg_script_nrows; i++) {
            const nm_cfg_script_row_t *r = &nm_cfg_script_rows[i];
            fprintf(f, "| `NCCLMPI_%s` | %s | %s%s%s | ", r->name, r->reader, *r->def ? "`" : "",
                    *r->def ? r->def : "(empty)", *r->def ? "`" : "");
            md_cell(f, r->doc);
            fputs(" |\n", f);
        }
        return;
    }
    for (int i = 0; i < nm_cfg_nrows; i++) {
        const nm_cfg_row_t *r = &nm_cfg_rows[i];
        value_str(r, val, sizeof(val));
        fprintf(f, "NCCLMPI_%s (%s, default \"%s\", current \"%s\"%s)\n", r->name, type_names[r->type], r->def, val,
                from_env[i] ? " from the environment" : "");
        fprintf(f, "    accepted: %s\n", nm_cfg_accepted(r, acc, sizeof(acc)));
        print_wrapped(f, r->doc, 4, 100);
    }
    fprintf(f, "\nRead by the scripts, not by the library:\n");
    for (int i = 0; i < nm_cfg_script_nrows; i++) {
        const nm_cfg_script_row_t *r = &nm_cfg_script_rows[i];
        if (script_test_only(r)) continue;
        char var[128];
        snprintf(var, sizeof(var), "NCCLMPI_%s", r->name);
        const char *v = NULL;
        for (char **e = environ; e && *e; e++)
            if (!strncmp(*e, var, strlen(var)) && (*e)[strlen(var)] == '=') v = *e + strlen(var) + 1;
        fprintf(f, "%s (%s, default \"%s\", %s%s%s)\n", var, r->reader, r->def, v ? "current \"" : "not set",
                v ? v : "", v ? "\" from the environment" : "");
        print_wrapped(f, r->doc, 4, 100);
    }
}

void nm_config_print_parsable(void *file)
{
    FILE *f = (FILE *)file;
    char acc[512], val[512];
    nm_config_load();
    for (int i = 0; i < nm_cfg_nrows; i++) {
        const nm_cfg_row_t *r = &nm_cfg_rows[i];
        value_str(r, val, sizeof(val));
        fprintf(f, "setting:NCCLMPI_%s:value:%s\n", r->name, val);
        fprintf(f, "setting:NCCLMPI_%s:source:%s\n", r->name, from_env[i] ? "environment" : "default");
        fprintf(f, "setting:NCCLMPI_%s:default:%s\n", r->name, r->def);
        fprintf(f, "setting:NCCLMPI_%s:type:%s\n", r->name, type_names[r->type]);
        fprintf(f, "setting:NCCLMPI_%s:accepted:%s\n", r->name, nm_cfg_accepted(r, acc, sizeof(acc)));
    }
    for (int i = 0; i < nm_cfg_script_nrows; i++) {
        const nm_cfg_script_row_t *r = &nm_cfg_script_rows[i];
        if (script_test_only(r)) continue;
        fprintf(f, "setting:NCCLMPI_%s:reader:%s\n", r->name, r->reader);
        fprintf(f, "setting:NCCLMPI_%s:default:%s\n", r->name, r->def);
    }
}
