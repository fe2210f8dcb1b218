/* ncclmpi: log sink. Lines are prefixed "[ncclmpi r<rank>] LEVEL SUBSYS", or "[ncclmpi pid <pid>]"
 * before MPI_Init tells the rank. */
#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

int nm_log_level = NM_LOG_WARN;
unsigned nm_log_mask = NM_SS_ALL;
static int log_rank = -1;

static const char *const lvl[] = {"NONE", "ERROR", "WARN", "INFO", "DEBUG", "TRACE"};
static const struct { const char *name; unsigned bit; } ss_names[] = {
    {"INIT", NM_SS_INIT}, {"ROUTE", NM_SS_ROUTE}, {"COLL", NM_SS_COLL}, {"P2P", NM_SS_P2P},
    {"STAGE", NM_SS_STAGE}, {"CONFIG", NM_SS_CONFIG}, {"CALL", NM_SS_CALL}, {"ALL", NM_SS_ALL}};

void nm_log_set_rank(int rank) { log_rank = rank; }
int nm_log_rank(void) { return log_rank; }

double nm_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

unsigned nm_log_parse_mask(const char *list)
{
    unsigned mask = 0;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", list ? list : "ALL");
    for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        for (size_t i = 0; i < sizeof(ss_names) / sizeof(ss_names[0]); i++)
            if (!strcasecmp(tok, ss_names[i].name)) mask |= ss_names[i].bit;
    return mask ? mask : NM_SS_ALL;
}

static const char *ss_name(unsigned ss)
{
    for (size_t i = 0; i < sizeof(ss_names) / sizeof(ss_names[0]); i++)
        if (ss_names[i].bit == ss) return ss_names[i].name;
    return "?";
}

void nm_log_write(int level, unsigned subsys, const char *file, int line, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    const char *base = strrchr(file, '/');
    char who[32];
    if (log_rank >= 0) snprintf(who, sizeof(who), "r%d", log_rank);
    else snprintf(who, sizeof(who), "pid %ld", (long)getpid());
    if (level >= NM_LOG_DEBUG)
        fprintf(stderr, "[ncclmpi %s] %s %s %s (%s:%d)\n", who, lvl[level], ss_name(subsys), msg,
                base ? base + 1 : file, line);
    else
        fprintf(stderr, "[ncclmpi %s] %s %s %s\n", who, lvl[level], ss_name(subsys), msg);
}
