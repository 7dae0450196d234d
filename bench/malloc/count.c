/* A malloc counter for `bench/allocations.py` (LD_PRELOAD): counts every call that allocates
 * (malloc, calloc, realloc, the aligned ones) in the process, all threads together, and at exit writes
 * the count to $SKYNET_MALLOC_COUNT_DIR/<pid>. It allocates nothing itself until then. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static atomic_ulong allocations;

static inline void counted(void) { atomic_fetch_add_explicit(&allocations, 1, memory_order_relaxed); }

void *malloc(size_t size) { counted(); return __libc_malloc(size); }
void *calloc(size_t count, size_t size) { counted(); return __libc_calloc(count, size); }
void *realloc(void *pointer, size_t size) { counted(); return __libc_realloc(pointer, size); }
void *memalign(size_t alignment, size_t size) { counted(); return __libc_memalign(alignment, size); }
void *aligned_alloc(size_t alignment, size_t size) { counted(); return __libc_memalign(alignment, size); }
int posix_memalign(void **out, size_t alignment, size_t size) {
    counted();
    void *pointer = __libc_memalign(alignment, size);
    if (pointer == NULL) return ENOMEM;
    *out = pointer;
    return 0;
}

__attribute__((destructor)) static void report(void) {
    const char *directory = getenv("SKYNET_MALLOC_COUNT_DIR");
    if (directory == NULL) return;
    unsigned long total = atomic_load(&allocations);
    char path[4096];
    snprintf(path, sizeof path, "%s/%d", directory, (int)getpid());
    FILE *file = fopen(path, "w");
    if (file == NULL) return;
    fprintf(file, "%lu\n", total);
    fclose(file);
}
