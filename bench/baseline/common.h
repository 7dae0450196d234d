/* The hand-written C baseline for `make bench`: a ROUTER/ROUTER load-balancing broker with credit,
 * a worker that announces 4 credits and answers every task at once (a no-op), and a client. One
 * message per task on every hop, no batching: what a careful C programmer writes first. */
#ifndef SKYNET_BASELINE_COMMON_H
#define SKYNET_BASELINE_COMMON_H

#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

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

static inline void unlimited(void *socket) {
    int zero = 0;
    zmq_setsockopt(socket, ZMQ_SNDHWM, &zero, sizeof zero);
    zmq_setsockopt(socket, ZMQ_RCVHWM, &zero, sizeof zero);
}

#endif
