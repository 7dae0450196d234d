/* broker FRONTEND BACKEND: clients (DEALER) send [task id]; workers (DEALER) send [READY, credit] once
 * and [client id, task id] per result. The broker queues tasks, sends each to the worker with the most
 * credit as [worker id][client id][task id], and forwards results to their client. */
#include "common.h"

#define MAX_WORKERS 256
#define ID_MAX 256

typedef struct {
    unsigned char id[ID_MAX];
    size_t len;
    int credit;
} worker_t;

typedef struct {
    unsigned char client[ID_MAX];
    size_t client_len;
    uint64_t task;
} item_t;

static item_t *queue;
static size_t queue_cap = 1 << 16, head, tail, count;

static void push(const unsigned char *client, size_t len, uint64_t task) {
    if (count == queue_cap) {
        item_t *bigger = malloc(sizeof(item_t) * queue_cap * 2);
        for (size_t i = 0; i < count; i++) bigger[i] = queue[(head + i) % queue_cap];
        free(queue);
        queue = bigger;
        head = 0;
        tail = count;
        queue_cap *= 2;
    }
    memcpy(queue[tail].client, client, len);
    queue[tail].client_len = len;
    queue[tail].task = task;
    tail = (tail + 1) % queue_cap;
    count++;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: broker FRONTEND BACKEND\n");
        return 2;
    }
    queue = malloc(sizeof(item_t) * queue_cap);
    void *ctx = zmq_ctx_new();
    void *front = zmq_socket(ctx, ZMQ_ROUTER), *back = zmq_socket(ctx, ZMQ_ROUTER);
    unlimited(front);
    unlimited(back);
    if (zmq_bind(front, argv[1]) != 0) die("bind frontend");
    if (zmq_bind(back, argv[2]) != 0) die("bind backend");
    worker_t workers[MAX_WORKERS];
    int nworkers = 0;
    unsigned char id[ID_MAX], a[ID_MAX], b[ID_MAX];
    zmq_pollitem_t items[] = {{back, 0, ZMQ_POLLIN, 0}, {front, 0, ZMQ_POLLIN, 0}};
    for (;;) {
        if (wait_ready(items, 2) < 0) {
            if (zmq_errno() == EINTR) continue;
            break;
        }
        if (items[0].revents & ZMQ_POLLIN) {
            for (;;) {
                int n = zmq_recv(back, id, ID_MAX, ZMQ_DONTWAIT);
                if (n < 0) break;
                int more;
                size_t ms = sizeof more;
                int alen = zmq_recv(back, a, ID_MAX, 0);
                zmq_getsockopt(back, ZMQ_RCVMORE, &more, &ms);
                int w;
                for (w = 0; w < nworkers; w++)
                    if (workers[w].len == (size_t)n && memcmp(workers[w].id, id, n) == 0) break;
                if (!more) { /* READY with credit */
                    if (w == nworkers && nworkers < MAX_WORKERS) {
                        memcpy(workers[w].id, id, n);
                        workers[w].len = n;
                        workers[w].credit = 0;
                        nworkers++;
                    }
                    int credit = 0;
                    memcpy(&credit, a + 5, sizeof credit); /* "READY" + int */
                    if (w < MAX_WORKERS) workers[w].credit += credit;
                    continue;
                }
                int blen = zmq_recv(back, b, ID_MAX, 0); /* task id */
                if (w < nworkers) workers[w].credit++;
                zmq_send(front, a, alen, ZMQ_SNDMORE);
                zmq_send(front, b, blen, 0);
            }
        }
        if (items[1].revents & ZMQ_POLLIN) {
            for (;;) {
                int n = zmq_recv(front, id, ID_MAX, ZMQ_DONTWAIT);
                if (n < 0) break;
                uint64_t task = 0;
                zmq_recv(front, &task, sizeof task, 0);
                push(id, n, task);
            }
        }
        /* Dispatch while there are tasks and credit: the worker with the most credit first. */
        while (count > 0) {
            int best = -1;
            for (int w = 0; w < nworkers; w++)
                if (workers[w].credit > 0 && (best < 0 || workers[w].credit > workers[best].credit)) best = w;
            if (best < 0) break;
            item_t *it = &queue[head];
            zmq_send(back, workers[best].id, workers[best].len, ZMQ_SNDMORE);
            zmq_send(back, it->client, it->client_len, ZMQ_SNDMORE);
            zmq_send(back, &it->task, sizeof it->task, 0);
            workers[best].credit--;
            head = (head + 1) % queue_cap;
            count--;
        }
    }
    return 0;
}
