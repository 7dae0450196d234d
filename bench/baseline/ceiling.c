/* ceiling ENDPOINT N [CREDIT [BATCH]]: the fastest credit cycle two processes run through libzmq on
 * this machine, as an upper bound for any broker that keeps at most CREDIT (4) tasks at a worker.
 *
 * No coordinator and no queue logic: a ROUTER "broker" (this process) holds N no-op tasks (8 bytes
 * each) and keeps CREDIT of them at a DEALER "worker" (a forked child), BATCH tasks per message (4:
 * credit granted and results returned in bulk, as SkyNet does; 1: one message per task, as the C
 * relay does). The worker echoes each message at once. Both wait with `wait_polled` (common.h). A
 * 2,000-task warm-up is not timed. Prints one JSON line. */
#include <sys/wait.h>

#include "common.h"

/* Runs `goal` tasks through the worker `id`, at most `credit` at a time, `batch` per message. */
static void cycle(void *sock, const unsigned char *id, size_t id_len, uint64_t goal, int credit, int batch) {
    uint64_t sent = 0, done = 0, tasks[MAX_TASKS_PER_MESSAGE] = {0};
    int in_flight = 0;
    unsigned char from[256];
    while (done < goal) {
        while (sent < goal && in_flight + batch <= credit) {
            int k = (int)(goal - sent < (uint64_t)batch ? goal - sent : (uint64_t)batch);
            zmq_send(sock, id, id_len, ZMQ_SNDMORE);
            zmq_send(sock, tasks, k * sizeof(uint64_t), 0);
            in_flight += k;
            sent += k;
        }
        wait_polled(sock);
        while (zmq_recv(sock, from, sizeof from, ZMQ_DONTWAIT) >= 0) {
            int n = zmq_recv(sock, tasks, sizeof tasks, 0);
            if (n > (int)sizeof tasks) n = sizeof tasks;
            int k = n / (int)sizeof(uint64_t);
            in_flight -= k;
            done += k;
        }
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: ceiling ENDPOINT N [CREDIT [BATCH]]\n");
        return 2;
    }
    uint64_t n = strtoull(argv[2], NULL, 10);
    int credit = argc > 3 ? atoi(argv[3]) : 4;
    int batch = argc > 4 ? atoi(argv[4]) : credit;
    if (n == 0 || credit < 1 || batch < 1 || batch > credit || batch > MAX_TASKS_PER_MESSAGE) {
        fprintf(stderr, "ceiling: N must be positive and 1 <= BATCH <= CREDIT, BATCH <= %d\n",
                MAX_TASKS_PER_MESSAGE);
        return 2;
    }
    /* Fork before either side makes a context (libzmq's threads do not survive a fork); the worker's
     * connect retries until the parent has bound. */
    pid_t child = fork();
    if (child < 0) {
        perror("ceiling: fork");
        return 1;
    }
    if (child == 0) {
        die_with_parent();
        return echo_worker(argv[1], "R");
    }
    void *ctx = zmq_ctx_new();
    void *sock = zmq_socket(ctx, ZMQ_ROUTER);
    unlimited(sock);
    if (zmq_bind(sock, argv[1]) != 0) {
        kill(child, SIGKILL);
        die("bind");
    }
    unsigned char id[256], hello[16];
    int id_len = zmq_recv(sock, id, sizeof id, 0);
    if (id_len < 0) die("receive the worker's hello");
    zmq_recv(sock, hello, sizeof hello, 0);

    cycle(sock, id, (size_t)id_len, 2000, credit, batch); /* warm-up, not timed */
    double start = now_s();
    cycle(sock, id, (size_t)id_len, n, credit, batch);
    double wall = now_s() - start;

    zmq_send(sock, id, id_len, ZMQ_SNDMORE);
    zmq_send(sock, "", 0, 0);
    waitpid(child, NULL, 0);
    printf("{\"workload\":\"ceiling\",\"tasks\":%llu,\"credit\":%d,\"batch\":%d,\"wall_s\":%.6f,"
           "\"tasks_per_s\":%.1f,\"cycle_us\":%.1f}\n",
           (unsigned long long)n, credit, batch, wall, n / wall, wall / ((double)n / credit) * 1e6);
    return 0;
}
