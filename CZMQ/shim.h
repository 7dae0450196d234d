// This module is libzmq itself (Debian's libzmq3-dev, <zmq.h>), not the high-level C binding
// that upstream also calls CZMQ (libczmq, zsock_*), which SkyNet does not use.
// Only Sources/ZeroMQ imports it.
#ifndef SKYNET_CZMQ_SHIM_H
#define SKYNET_CZMQ_SHIM_H
#include <zmq.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <poll.h>
#include <errno.h>
#include <pthread.h>
#include <unistd.h>
#include <sys/prctl.h>

/// prctl(2) is variadic, which Swift cannot call: the reactor thread's timer slack (how late the
/// kernel may fire its timers to save wake-ups; 50 µs by default) in nanoseconds.
static inline int skynet_set_timer_slack(unsigned long nanoseconds) {
    return prctl(PR_SET_TIMERSLACK, nanoseconds, 0, 0, 0);
}
#endif
