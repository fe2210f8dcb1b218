// HandleMap (src/util/handle_map.h) against std::unordered_map: random inserts, lookups and
// erasures of pointer-like keys (aligned, clustered, as an allocator hands out request handles),
// at sizes that make it grow and that fill long probe runs; every key checked after every step
// of a phase, and the iteration compared.
#include <stdint.h>
#include <stdio.h>

#include <random>
#include <unordered_map>

#include "util/handle_map.h"

using namespace ncclmpi;

typedef const void *Key;  // as MPI_Request is in Open MPI

static int failures;
#define CHECK(c, ...)                                                                                                  \
    do {                                                                                                               \
        if (!(c) && failures++ < 10) {                                                                                 \
            fprintf(stderr, "test_handle_map: " __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                                       \
        }                                                                                                              \
    } while (0)

static Key key(uint64_t i) { return (Key)(uintptr_t)(0x7f0000001000ull + i * 192); }  // 192-byte objects

int main()
{
    std::mt19937_64 rng(12345);
    for (int round = 0; round < 4; round++) {
        const uint64_t universe = round == 0 ? 8 : round == 1 ? 64 : round == 2 ? 1000 : 20000;
        HandleMap<Key, long> m(nullptr);
        std::unordered_map<Key, long> ref;
        CHECK(m.find(nullptr) == nullptr && !m.erase(nullptr), "the null key is never stored");
        for (int step = 0; step < 200000; step++) {
            const Key k = key(rng() % universe);
            const unsigned what = (unsigned)(rng() % 3);
            if (what == 0) {
                const long v = (long)(rng() & 0xffffff) + 1;
                m[k] = v;
                ref[k] = v;
            } else if (what == 1) {
                const bool a = m.erase(k), b = ref.erase(k) != 0;
                CHECK(a == b, "round %d step %d: erase %p returned %d, expected %d", round, step, k, a, b);
            } else {
                long *p = m.find(k);
                auto it = ref.find(k);
                CHECK((p != nullptr) == (it != ref.end()) && (!p || *p == it->second),
                      "round %d step %d: find %p gave %ld, expected %ld", round, step, k, p ? *p : -1,
                      it != ref.end() ? it->second : -1);
            }
            CHECK(m.size() == ref.size(), "round %d step %d: size %zu, expected %zu", round, step, m.size(), ref.size());
            if (step % 20000 == 19999) {  // every key of the universe, and the iteration
                for (uint64_t i = 0; i < universe; i++) {
                    long *p = m.find(key(i));
                    auto it = ref.find(key(i));
                    CHECK((p != nullptr) == (it != ref.end()) && (!p || *p == it->second), "round %d step %d: key %llu wrong",
                          round, step, (unsigned long long)i);
                }
                size_t seen = 0;
                m.for_each([&](Key k2, long &v) {
                    seen++;
                    auto it = ref.find(k2);
                    CHECK(it != ref.end() && it->second == v, "round %d: iteration gave a key not in the reference", round);
                });
                CHECK(seen == ref.size(), "round %d: iteration saw %zu of %zu", round, seen, ref.size());
            }
        }
        // empty it completely, then use it again
        for (auto &e : ref) CHECK(m.erase(e.first), "round %d: final erase failed", round);
        CHECK(m.size() == 0, "round %d: not empty after erasing everything", round);
        m[key(3)] = 7;
        CHECK(m.find(key(3)) && *m.find(key(3)) == 7 && m.size() == 1, "round %d: reuse after emptying", round);
    }
    printf("test_handle_map: %d failure(s)\n", failures);
    return failures ? 1 : 0;
}
