/*
 * The runner's loader: what a trial pod executes as /shipyard/bin/runner when the runner
 * reaches the pod in ConfigMaps (a ConfigMap holds at most 1 MiB, the static Go runner is
 * larger, so it is split into parts /shipyard/bin/runner.0, runner.1, ...). It joins the parts
 * into a sealed memfd (nobody can change it, nothing of it is on a writable filesystem) and
 * executes that with its own arguments and environment. No libc, no program of the task image:
 * raw system calls only (x86_64 and aarch64), built with `cc -static -nostdlib -Os`.
 */

#define DIR "/shipyard/bin/runner."
#define BUF_SIZE 65536

#if defined(__x86_64__)
#define SYS_read 0
#define SYS_write 1
#define SYS_open 2
#define SYS_close 3
#define SYS_fcntl 72
#define SYS_exit 60
#define SYS_memfd_create 319
#define SYS_execveat 322

static long sys3(long n, long a, long b, long c) {
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
    return r;
}

static long sys5(long n, long a, long b, long c, long d, long e) {
    long r;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8)
                     : "rcx", "r11", "memory");
    return r;
}

__asm__(".text\n.global _start\n_start:\n xor %rbp,%rbp\n mov %rsp,%rdi\n and $-16,%rsp\n"
        " call start_c\n hlt\n");
#define OPEN(path) sys3(SYS_open, (long)(path), 0 /* O_RDONLY */, 0)

#elif defined(__aarch64__)
#define SYS_read 63
#define SYS_write 64
#define SYS_openat 56
#define SYS_close 57
#define SYS_fcntl 25
#define SYS_exit 93
#define SYS_memfd_create 279
#define SYS_execveat 281

static long sys5(long n, long a, long b, long c, long d, long e) {
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = e;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4) : "memory");
    return x0;
}

static long sys3(long n, long a, long b, long c) { return sys5(n, a, b, c, 0, 0); }

__asm__(".text\n.global _start\n_start:\n mov x0, sp\n bl start_c\n");
#define OPEN(path) sys5(SYS_openat, -100 /* AT_FDCWD */, (long)(path), 0, 0, 0)

#else
#error "the runner's loader supports x86_64 and aarch64"
#endif

#define MFD_CLOEXEC 1
#define MFD_ALLOW_SEALING 2
#define F_ADD_SEALS 1033
#define SEALS (1 | 2 | 4 | 8) /* F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE */
#define AT_EMPTY_PATH 0x1000
#define ENOENT 2

static char buf[BUF_SIZE];

static void fail(const char *what) {
    const char *p = what;
    while (*p) p++;
    sys3(SYS_write, 2, (long)"shipyard runner loader: ", 24);
    sys3(SYS_write, 2, (long)what, p - what);
    sys3(SYS_write, 2, (long)"\n", 1);
    sys3(SYS_exit, 127, 0, 0);
}

static int copy_into(long to, long from) {
    for (;;) {
        long n = sys3(SYS_read, from, (long)buf, BUF_SIZE);
        if (n == 0) return 0;
        if (n < 0) return -1;
        for (long off = 0; off < n;) {
            long w = sys3(SYS_write, to, (long)(buf + off), n - off);
            if (w <= 0) return -1;
            off += w;
        }
    }
}

__attribute__((used)) void start_c(long *sp) {
    long argc = sp[0];
    char **argv = (char **)(sp + 1);
    char **envp = argv + argc + 1;
    long mem = sys3(SYS_memfd_create, (long)"shipyard-runner", MFD_CLOEXEC | MFD_ALLOW_SEALING, 0);
    if (mem < 0) fail("memfd_create failed");
    char path[sizeof(DIR) + 4];
    int parts = 0;
    for (int i = 0; i < 100; i++) {
        int k = 0;
        for (const char *p = DIR; *p; p++) path[k++] = *p;
        if (i >= 10) path[k++] = (char)('0' + i / 10);
        path[k++] = (char)('0' + i % 10);
        path[k] = 0;
        long fd = OPEN(path);
        if (fd == -ENOENT) break;
        if (fd < 0) fail("cannot open a part of the runner");
        if (copy_into(mem, fd) != 0) fail("cannot read a part of the runner");
        sys3(SYS_close, fd, 0, 0);
        parts++;
    }
    if (parts == 0) fail("no part of the runner found (" DIR "0)");
    if (sys3(SYS_fcntl, mem, F_ADD_SEALS, SEALS) < 0) fail("cannot seal the runner");
    sys5(SYS_execveat, mem, (long)"", (long)argv, (long)envp, AT_EMPTY_PATH);
    fail("cannot execute the runner");
}
