/* The runtime of generated C's and C++'s tests, appended to the program (one translation unit:
 * the images' documented test form), rendered by worker/src/pipeline/forms/c_family.rs, which
 * puts the report's path and the nonce before it and, after it, one function per case (its
 * inputs as literals of the parameters' types, the call, its value rendered as JSON), then
 * codegen_cases() and main.
 *
 * Each case runs in a child process of its own (fork), under a wall-clock timer (SIGALRM) of
 * its timeout: a crash, an abort or a runaway loop ends that case alone. The child sends what
 * the function returned (or, in C++, threw) through a pipe; the parent writes one JSON line per
 * case to the report file: that, or the timeout, the signal that ended the child (names
 * "signal" and the signal's, "abort" too for SIGABRT: a failed assert), or the status it exited
 * with before answering. The worker reads the file back and judges it (forms/judge.rs). What the
 * functions print goes to /dev/null. Every name here starts with codegen_ (the program shares
 * the translation unit). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct codegen_buf {
    char *data;
    size_t len, cap;
};

static void codegen_put(struct codegen_buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->len + n + 1 > cap) cap *= 2;
        char *grown = (char *)realloc(b->data, cap);
        if (!grown) _exit(71);
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void codegen_puts(struct codegen_buf *b, const char *s) { codegen_put(b, s, strlen(s)); }

/* s as a JSON string (NULL as null); bytes that are not UTF-8 pass through, and the worker
 * then reads the line as unwritten. */
static void codegen_str(struct codegen_buf *b, const char *s) {
    if (!s) {
        codegen_puts(b, "null");
        return;
    }
    codegen_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        switch (*p) {
        case '"': codegen_puts(b, "\\\""); break;
        case '\\': codegen_puts(b, "\\\\"); break;
        case '\n': codegen_puts(b, "\\n"); break;
        case '\r': codegen_puts(b, "\\r"); break;
        case '\t': codegen_puts(b, "\\t"); break;
        default:
            if (*p < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", *p);
                codegen_puts(b, esc);
            } else {
                codegen_put(b, (const char *)p, 1);
            }
        }
    }
    codegen_put(b, "\"", 1);
}

static void codegen_double(struct codegen_buf *b, double d) {
    char text[64];
    if (isnan(d) || isinf(d)) {
        codegen_str(b, isnan(d) ? "NaN" : d > 0 ? "Infinity" : "-Infinity");
        return;
    }
    snprintf(text, sizeof text, "%.17g", d);
    codegen_puts(b, text);
}

static void codegen_llong(struct codegen_buf *b, long long v) {
    char text[32];
    snprintf(text, sizeof text, "%lld", v);
    codegen_puts(b, text);
}

static void codegen_ullong(struct codegen_buf *b, unsigned long long v) {
    char text[32];
    snprintf(text, sizeof text, "%llu", v);
    codegen_puts(b, text);
}

/* `"raised": [names...], "message": message` */
static void codegen_raised(struct codegen_buf *b, const char *const *names, int count,
                           const char *message) {
    codegen_puts(b, "\"raised\": [");
    for (int i = 0; i < count; i++) {
        if (i) codegen_puts(b, ", ");
        codegen_str(b, names[i]);
    }
    codegen_puts(b, "], \"message\": ");
    codegen_str(b, message ? message : "");
}

static double codegen_now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int codegen_report = -1;

static void codegen_write(const char *s, size_t n) {
    while (n > 0) {
        ssize_t w = write(codegen_report, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

static const char *codegen_signal_name(int sig) {
    switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGFPE: return "SIGFPE";
    case SIGBUS: return "SIGBUS";
    case SIGILL: return "SIGILL";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGPIPE: return "SIGPIPE";
    default: return "SIGNAL";
    }
}

typedef void (*codegen_call)(struct codegen_buf *);

static void codegen_run(int function, int index, long timeout_ms, codegen_call call) {
    int fds[2];
    double started = codegen_now_ms();
    struct codegen_buf line = {0}, got = {0};
    char head[128];
    snprintf(head, sizeof head, "{\"function\": %d, \"case\": %d, ", function, index);
    codegen_puts(&line, head);
    pid_t pid = pipe(fds) == 0 ? fork() : -1;
    if (pid == 0) {
        struct itimerval timer;
        memset(&timer, 0, sizeof timer);
        timer.it_value.tv_sec = timeout_ms / 1000;
        timer.it_value.tv_usec = (timeout_ms % 1000) * 1000;
        close(fds[0]);
        setitimer(ITIMER_REAL, &timer, NULL);
        struct codegen_buf out = {0};
        call(&out);
        for (size_t at = 0; at < out.len;) {
            ssize_t w = write(fds[1], out.data + at, out.len - at);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) _exit(72);
            at += (size_t)w;
        }
        _exit(0);
    }
    int status = 0;
    if (pid > 0) {
        char chunk[4096];
        close(fds[1]);
        for (;;) {
            ssize_t r = read(fds[0], chunk, sizeof chunk);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            codegen_put(&got, chunk, (size_t)r);
        }
        close(fds[0]);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
    }
    if (pid < 0) {
        const char *names[] = {"CodegenForkError"};
        codegen_raised(&line, names, 1, strerror(errno));
    } else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) {
        codegen_puts(&line, "\"timeout\": true");
    } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && got.len > 0) {
        codegen_put(&line, got.data, got.len);
    } else if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        const char *names[] = {"signal", codegen_signal_name(sig), "abort"};
        codegen_raised(&line, names, sig == SIGABRT ? 3 : 2, strsignal(sig));
    } else {
        char why[96], code[32];
        snprintf(code, sizeof code, "status %d", WEXITSTATUS(status));
        snprintf(why, sizeof why, "the function ended the process with status %d",
                 WEXITSTATUS(status));
        const char *names[] = {"exit", code};
        codegen_raised(&line, names, 2, why);
    }
    char tail[64];
    snprintf(tail, sizeof tail, ", \"ms\": %.3f}\n", codegen_now_ms() - started);
    codegen_puts(&line, tail);
    codegen_write(line.data, line.len);
    free(line.data);
    free(got.data);
}

static void codegen_cases(void);

int main(void) {
    struct codegen_buf first = {0};
    int devnull = open("/dev/null", O_WRONLY);
    codegen_report = open(CODEGEN_REPORT, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (codegen_report < 0) return 70;
    if (devnull >= 0) dup2(devnull, 1);
    codegen_puts(&first, "{\"nonce\": ");
    codegen_str(&first, CODEGEN_NONCE);
    codegen_puts(&first, "}\n");
    codegen_write(first.data, first.len);
    codegen_cases();
    return 0;
}
