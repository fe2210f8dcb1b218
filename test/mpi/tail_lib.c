/* An empty shared object for --slow-path (common.h): each dlopen of a fresh copy of it
 * appends a new object to the link map, so ncclmpi's next wrapper call leaves its fast path
 * and goes through nm_enter() (the described call). */
int nm_test_tail_marker(void);
int nm_test_tail_marker(void) { return 42; }
