/* batched ENDPOINT N [CREDIT]: SkyNet's design with C's per-message cost, as a yardstick for SkyNet.
 *
 * Three processes, like `skynet bench throughput`: a client (forked) submits N no-op tasks (8 bytes
 * each) up front, 64 per message; a broker (this process, one ROUTER) queues them and keeps CREDIT (4)
 * of them at a worker (forked), sending all the tasks for the credit a worker returns in one message;
 * the worker answers each message with one message of results, and the broker forwards that message to
 * the client as it came. Everyone waits with `wait_polled` (common.h), as SkyNet's reactors poll. No
 * ids, leases, retries or journal: the floor of the design, not a job queue. The client times a
 * 2,000-task warm-up (not reported) and then the N tasks, first submit to last result, and prints
 * one JSON line. */
#include <sys/wait.h>

#include "common.h"

static int client(const char *endpoint, uint64_t n) {
    void *ctx = zmq_ctx_new();
    void *sock = zmq_socket(ctx, ZMQ_DEALER);
    unlimited(sock);
    if (zmq_connect(sock, endpoint) != 0) die("connect");
    zmq_send(sock, "C", 1, 0);
    uint64_t tasks[MAX_TASKS_PER_MESSAGE] = {0};
    for (int timed = 0; timed < 2; timed++) {
        uint64_t goal = timed ? n : 2000, sent = 0, done = 0;
        double start = now_s();
        while (sent < goal) {
            int k = goal - sent < MAX_TASKS_PER_MESSAGE ? (int)(goal - sent) : MAX_TASKS_PER_MESSAGE;
            zmq_send(sock, tasks, k * sizeof(uint64_t), 0);
            sent += k;
        }
        while (done < goal) {
            wait_polled(sock);
            int m;
            while ((m = zmq_recv(sock, tasks, sizeof tasks, ZMQ_DONTWAIT)) >= 0) done += m / sizeof(uint64_t);
        }
        if (timed) {
            double wall = now_s() - start;
            printf("{\"workload\":\"batched\",\"tasks\":%llu,\"wall_s\":%.6f,\"tasks_per_s\":%.1f}\n",
                   (unsigned long long)n, wall, n / wall);
            fflush(stdout);
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: batched ENDPOINT N [CREDIT]\n");
        return 2;
    }
    uint64_t n = strtoull(argv[2], NULL, 10);
    int credit = argc > 3 ? atoi(argv[3]) : 4;
    if (n == 0 || n > 100000000 || credit < 1 || credit > MAX_TASKS_PER_MESSAGE) {
        fprintf(stderr, "batched: N must be 1 to 100000000 and CREDIT 1 to %d\n",
                MAX_TASKS_PER_MESSAGE);
        return 2;
    }
    /* Fork before any context exists (libzmq's threads do not survive a fork); the children's
     * connects retry until the broker has bound. */
    pid_t children[2];
    for (int i = 0; i < 2; i++) {
        children[i] = fork();
        if (children[i] < 0) {
            perror("batched: fork");
            return 1;
        }
        if (children[i] == 0) {
            die_with_parent();
            return i == 0 ? echo_worker(argv[1], "W") : client(argv[1], n);
        }
    }
    void *ctx = zmq_ctx_new();
    void *sock = zmq_socket(ctx, ZMQ_ROUTER);
    unlimited(sock);
    if (zmq_bind(sock, argv[1]) != 0) die("bind");

    uint64_t *queue = malloc(sizeof(uint64_t) * (n + 2000));
    if (!queue) die("allocate the queue");
    size_t head = 0, tail = 0;
    unsigned char worker_id[256], client_id[256], from[256];
    int worker_len = -1, client_len = -1, credit_left = 0;
    uint64_t buffer[MAX_TASKS_PER_MESSAGE], finished = 0, total = n + 2000;
    while (finished < total) {
        wait_polled(sock);
        int from_len;
        while ((from_len = zmq_recv(sock, from, sizeof from, ZMQ_DONTWAIT)) >= 0) {
            int m = zmq_recv(sock, buffer, sizeof buffer, 0);
            if (m > (int)sizeof buffer) m = sizeof buffer; /* truncated: only our own peers send here */
            if (m == 1) { /* a hello: "W" from the worker, "C" from the client */
                if (((char *)buffer)[0] == 'W') {
                    memcpy(worker_id, from, from_len);
                    worker_len = from_len;
                    credit_left = credit;
                } else {
                    memcpy(client_id, from, from_len);
                    client_len = from_len;
                }
            } else if (from_len == worker_len && memcmp(from, worker_id, from_len) == 0) {
                /* Results: the credit comes back, the message goes on to the client as it came. */
                int k = m / (int)sizeof(uint64_t);
                credit_left += k;
                finished += k;
                zmq_send(sock, client_id, client_len, ZMQ_SNDMORE);
                zmq_send(sock, buffer, m, 0);
            } else if (m > 0) {
                memcpy(queue + tail, buffer, m);
                tail += m / sizeof(uint64_t);
            }
            /* Refill the worker's credit in one message before reading on, as SkyNet's broker sends
             * TASKs before what goes to coordinators. */
            if (worker_len > 0 && credit_left > 0 && head < tail) {
                int k = tail - head < (size_t)credit_left ? (int)(tail - head) : credit_left;
                zmq_send(sock, worker_id, worker_len, ZMQ_SNDMORE);
                zmq_send(sock, queue + head, k * sizeof(uint64_t), 0);
                head += k;
                credit_left -= k;
            }
        }
    }
    zmq_send(sock, worker_id, worker_len, ZMQ_SNDMORE);
    zmq_send(sock, "", 0, 0);
    for (int i = 0; i < 2; i++) waitpid(children[i], NULL, 0);
    return 0;
}
