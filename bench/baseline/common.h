/* The hand-written C baseline for `make bench`: a ROUTER/ROUTER load-balancing broker with credit,
 * a worker that announces 4 credits and answers every task at once (a no-op), and a client. One
 * message per task on every hop, no batching: what a careful C programmer writes first. */
#ifndef SKYNET_BASELINE_COMMON_H
#define SKYNET_BASELINE_COMMON_H

#include <errno.h>
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

static inline void unlimited(void *socket) {
    int zero = 0;
    zmq_setsockopt(socket, ZMQ_SNDHWM, &zero, sizeof zero);
    zmq_setsockopt(socket, ZMQ_RCVHWM, &zero, sizeof zero);
}

#endif
