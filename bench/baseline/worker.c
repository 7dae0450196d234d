/* worker BACKEND [CREDIT]: announces CREDIT (4) and answers every task at once with its client id
 * and task id (a no-op task). */
#include "common.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: worker BACKEND [CREDIT]\n");
        return 2;
    }
    int credit = argc > 2 ? atoi(argv[2]) : 4;
    void *ctx = zmq_ctx_new();
    void *sock = zmq_socket(ctx, ZMQ_DEALER);
    unlimited(sock);
    if (zmq_connect(sock, argv[1]) != 0) die("connect");
    unsigned char ready[5 + sizeof(int)];
    memcpy(ready, "READY", 5);
    memcpy(ready + 5, &credit, sizeof credit);
    zmq_send(sock, ready, sizeof ready, 0);
    unsigned char client[256], task[64];
    zmq_pollitem_t item = {sock, 0, ZMQ_POLLIN, 0};
    for (;;) {
        /* Without BASELINE_SPIN_US the worker blocks in zmq_recv, as it always did. */
        if (spin_window() > 0 && wait_ready(&item, 1) < 0) {
            if (zmq_errno() == EINTR) continue;
            break;
        }
        int n = zmq_recv(sock, client, sizeof client, 0);
        if (n < 0) {
            if (zmq_errno() == EINTR) continue;
            break;
        }
        int t = zmq_recv(sock, task, sizeof task, 0);
        zmq_send(sock, client, n, ZMQ_SNDMORE);
        zmq_send(sock, task, t, 0);
    }
    return 0;
}
