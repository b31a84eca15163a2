/* The bracket of `python -m benchmarks.callgrind`: callgrind's client requests, which Python cannot issue itself
 * (each is a magic instruction sequence that valgrind recognises, a no-op on a real CPU, so the target also runs
 * without valgrind). The harness compiles this at run time against the system's valgrind headers. The counts
 * start at zero and are collected only between `bracket_start` and `bracket_stop` (valgrind runs with
 * --collect-atstart=no), and each stop writes one dump named for what was measured. */
#include <valgrind/callgrind.h>

void bracket_start(void) {
    CALLGRIND_ZERO_STATS;
    CALLGRIND_TOGGLE_COLLECT;
}

void bracket_stop(const char *name) {
    CALLGRIND_TOGGLE_COLLECT;
    CALLGRIND_DUMP_STATS_AT(name);
}
