/* The hand-written C baseline for `make bench`: a ROUTER/ROUTER load-balancing broker with credit,
 * a worker that announces 4 credits and answers every task at once (a no-op), and a client. One
 * message per task on every hop, no batching: what a careful C programmer writes first. */
#ifndef SKYNET_BASELINE_COMMON_H
#define SKYNET_BASELINE_COMMON_H

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

/* The most no-op tasks (8 bytes each) one message carries in ceiling and batched: the echo worker's
 * buffer holds this many. */
#define MAX_TASKS_PER_MESSAGE 64

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline void die(const char *what) {
    fprintf(stderr, "baseline: %s: %s\n", what, zmq_strerror(zmq_errno()));
    exit(1);
}

/* BASELINE_SPIN_US from the environment, in seconds (0 when unset). */
static inline double spin_window(void) {
    static double spin = -1;
    if (spin < 0) {
        const char *text = getenv("BASELINE_SPIN_US");
        spin = text ? atof(text) / 1e6 : 0;
    }
    return spin;
}

/* Waits until one of `items` is ready, like zmq_poll(items, n, -1). With BASELINE_SPIN_US=N in the
 * environment it first polls without blocking for up to N microseconds, yielding the CPU between polls
 * (a fixed window; SkyNet's reactor adapts its own): off by default, so `make bench` measures the plain
 * C relay; on, it shows what the same polling does for C. */
static inline int wait_ready(zmq_pollitem_t *items, int n) {
    double spin = spin_window();
    if (spin > 0) {
        double until = now_s() + spin;
        do {
            int rc = zmq_poll(items, n, 0);
            if (rc != 0) return rc;
            sched_yield();
        } while (now_s() < until);
    }
    return zmq_poll(items, n, -1);
}

/* Waits until `socket` has a message the way SkyNet's reactors do under steady traffic: polls without
 * blocking for up to 200 µs, yielding the CPU between polls, then blocks. The cheapest wait measured
 * here for a credit cycle (busy polling without yielding starves libzmq's I/O threads on 2 vCPUs;
 * blocking at once pays a thread wake-up per message). Used by ceiling and batched. */
static inline void wait_polled(void *socket) {
    zmq_pollitem_t item = {socket, 0, ZMQ_POLLIN, 0};
    double until = now_s() + 200e-6;
    while (zmq_poll(&item, 1, 0) == 0) {
        if (now_s() > until) {
            zmq_poll(&item, 1, -1);
            return;
        }
        sched_yield();
    }
}

/* For a forked child: die with the parent (a benchmark killed on a timeout leaves no process behind). */
static inline void die_with_parent(void) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1) exit(1);
}

static inline void unlimited(void *socket) {
    int zero = 0;
    zmq_setsockopt(socket, ZMQ_SNDHWM, &zero, sizeof zero);
    zmq_setsockopt(socket, ZMQ_RCVHWM, &zero, sizeof zero);
}

/* The worker of ceiling and batched (a forked child): a DEALER that says `hello` (one byte) and then
 * answers every message of up to MAX_TASKS_PER_MESSAGE tasks with the same message, until an empty
 * message tells it to stop. */
static inline int echo_worker(const char *endpoint, const char *hello) {
    void *ctx = zmq_ctx_new();
    void *sock = zmq_socket(ctx, ZMQ_DEALER);
    unlimited(sock);
    if (zmq_connect(sock, endpoint) != 0) die("connect");
    zmq_send(sock, hello, 1, 0);
    uint64_t tasks[MAX_TASKS_PER_MESSAGE];
    for (;;) {
        wait_polled(sock);
        int n;
        while ((n = zmq_recv(sock, tasks, sizeof tasks, ZMQ_DONTWAIT)) >= 0) {
            if (n == 0) return 0;
            if (n > (int)sizeof tasks) n = sizeof tasks; /* truncated: only our own peers send here */
            zmq_send(sock, tasks, n, 0);
        }
    }
}

#endif
