/* ncclmpi: logging by level and subsystem; the level is checked before formatting. */
#ifndef NM_UTIL_LOG_H
#define NM_UTIL_LOG_H
#ifdef __cplusplus
extern "C" {
#endif

typedef enum { NM_LOG_NONE = 0, NM_LOG_ERROR, NM_LOG_WARN, NM_LOG_INFO, NM_LOG_DEBUG, NM_LOG_TRACE } nm_log_level_t;

typedef enum {
    NM_SS_INIT = 1 << 0, NM_SS_ROUTE = 1 << 1, NM_SS_COLL = 1 << 2, NM_SS_P2P = 1 << 3,
    NM_SS_STAGE = 1 << 4, NM_SS_CONFIG = 1 << 5, NM_SS_CALL = 1 << 6, NM_SS_ALL = 0x7f
} nm_subsys_t;

extern int nm_log_level;
extern unsigned nm_log_mask;

void nm_log_write(int level, unsigned subsys, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
void nm_log_set_rank(int rank);
int nm_log_rank(void);
/* Monotonic seconds (for durations in logs, timeouts and task descriptions). */
double nm_now_s(void);
unsigned nm_log_parse_mask(const char *list);

#define NM_LOG(level, ss, ...)                                                                \
    do {                                                                                      \
        if ((level) <= nm_log_level && (nm_log_mask & NM_SS_##ss))                            \
            nm_log_write((level), NM_SS_##ss, __FILE__, __LINE__, __VA_ARGS__);               \
    } while (0)
#define NM_ERROR(ss, ...) NM_LOG(NM_LOG_ERROR, ss, __VA_ARGS__)
#define NM_WARN(ss, ...) NM_LOG(NM_LOG_WARN, ss, __VA_ARGS__)
#define NM_INFO(ss, ...) NM_LOG(NM_LOG_INFO, ss, __VA_ARGS__)
#define NM_DEBUG(ss, ...) NM_LOG(NM_LOG_DEBUG, ss, __VA_ARGS__)
#define NM_TRACE(ss, ...) NM_LOG(NM_LOG_TRACE, ss, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif
