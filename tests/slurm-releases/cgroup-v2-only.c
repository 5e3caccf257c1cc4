/* cgroup-v2-only.so — LD_PRELOAD'ed into the test cluster's slurmd (only there, only in tests).
 *
 * The test root filesystems run Slurm's cgroup/v2 plugin on a real cgroup2 hierarchy that enter.sh
 * mounts in a cgroup namespace of their own. But this machine's kernel also has cgroup v1 hierarchies
 * (its init mounted them), and no namespace hides those from /proc/PID/cgroup: Slurm reads that file,
 * sees "N:memory:/..." lines beside "0::/...", and stops with "Hybrid mode is not supported". This
 * library shows slurmd and its slurmstepds only the "0::" line of /proc/PID/cgroup, as a host without
 * v1 would; every cgroup operation Slurm then makes is the real one. The node agent, which reads
 * /proc/PID/cgroup of job processes, is not preloaded: it sees the file as the kernel writes it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef int (*openat_fn)(int, const char *, int, ...);
typedef FILE *(*fopen_fn)(const char *, const char *);

/* "/proc/<self|pid>/cgroup" */
static int is_proc_cgroup(const char *path) {
    if (!path || strncmp(path, "/proc/", 6) != 0)
        return 0;
    const char *slash = strchr(path + 6, '/');
    return slash && slash != path + 6 && strcmp(slash, "/cgroup") == 0;
}

/* A memfd holding only the unified-hierarchy line(s) of `path`; -1 (errno set) if it cannot be read. */
static int unified_only(const char *path) {
    static openat_fn real_openat;
    if (!real_openat)
        real_openat = (openat_fn)dlsym(RTLD_NEXT, "openat");
    int in = real_openat(AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -1;
    char text[65536];
    size_t used = 0;
    ssize_t got;
    while (used < sizeof text - 1 && (got = read(in, text + used, sizeof text - 1 - used)) > 0)
        used += (size_t)got;
    close(in);
    text[used] = '\0';
    int out = memfd_create("cgroup-v2-only", MFD_CLOEXEC);
    if (out < 0)
        return -1;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "0::", 3) == 0 && (write(out, line, strlen(line)) < 0 || write(out, "\n", 1) < 0)) {
            close(out);
            return -1;
        }
    }
    lseek(out, 0, SEEK_SET);
    return out;
}

static int mode_of(int flags, va_list args) {
    return (flags & (O_CREAT | O_TMPFILE)) ? va_arg(args, int) : 0;
}

#define OPENAT(name)                                                         \
    int name(int dir, const char *path, int flags, ...) {                    \
        static openat_fn real;                                               \
        if (!real)                                                           \
            real = (openat_fn)dlsym(RTLD_NEXT, #name);                       \
        if (is_proc_cgroup(path))                                            \
            return unified_only(path);                                       \
        va_list args;                                                        \
        va_start(args, flags);                                               \
        int mode = mode_of(flags, args);                                     \
        va_end(args);                                                        \
        return real(dir, path, flags, mode);                                 \
    }
OPENAT(openat)
OPENAT(openat64)

/* open(path) is openat(AT_FDCWD, path): one interposer each. */
#define OPEN(name, at)                                                       \
    int name(const char *path, int flags, ...) {                             \
        va_list args;                                                        \
        va_start(args, flags);                                               \
        int mode = mode_of(flags, args);                                     \
        va_end(args);                                                        \
        return at(AT_FDCWD, path, flags, mode);                              \
    }
OPEN(open, openat)
OPEN(open64, openat64)

#define FOPEN(name)                                                          \
    FILE *name(const char *path, const char *how) {                          \
        static fopen_fn real;                                                \
        if (!real)                                                           \
            real = (fopen_fn)dlsym(RTLD_NEXT, #name);                        \
        if (is_proc_cgroup(path)) {                                          \
            int fd = unified_only(path);                                     \
            return fd < 0 ? NULL : fdopen(fd, "r");                          \
        }                                                                    \
        return real(path, how);                                              \
    }
FOPEN(fopen)
FOPEN(fopen64)
