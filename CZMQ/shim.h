// This module is libzmq itself (Debian's libzmq3-dev, <zmq.h>), not the high-level C binding
// that upstream also calls CZMQ (libczmq, zsock_*), which SkyNet does not use.
// Only Sources/ZeroMQ imports it.
#ifndef SKYNET_CZMQ_SHIM_H
#define SKYNET_CZMQ_SHIM_H
#include <zmq.h>
#include <sys/eventfd.h>
#include <poll.h>
#include <errno.h>
#include <pthread.h>
#include <unistd.h>
#endif
