// Compiled into evalrun only in sanitizer builds (-DEVALRUN_SANITIZE, scripts/test_sanitized.sh):
// defaults for this program's sanitizer runtime; ASAN_OPTIONS from the environment still wins.
//
// fast_unwind_on_malloc=0: Debian's Open MPI libraries have no frame pointers, so the fast unwinder
// records a single frame for what MPI_Init allocates, often inside an MCA component that Open MPI
// dlclose()s before exit ("<unknown module>"), and LeakSanitizer cannot tell those blocks from ours.
// With full stacks each of them runs through libmpi / libopen-rte / libopen-pal, which
// scripts/sanitizer/lsan.supp names. It slows allocation down (about 5x on a model test), so only
// this MPI program gets it; the library test binaries keep the fast unwinder.
extern "C" const char* __asan_default_options() { return "fast_unwind_on_malloc=0"; }
