/* client FRONTEND throughput N | latency N: prints one JSON line.
 * throughput: sends N tasks at once (after a 200-task warm-up) and times first send to last result.
 * latency: N sequential round trips; p50/p99 in microseconds. */
#include "common.h"

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void round_trips(void *sock, uint64_t n, uint64_t *next) {
    uint64_t got = 0, sent = 0, reply;
    zmq_pollitem_t item = {sock, 0, ZMQ_POLLIN, 0};
    while (got < n) {
        while (sent < n && sent - got < 100000) {
            uint64_t task = (*next)++;
            zmq_send(sock, &task, sizeof task, 0);
            sent++;
        }
        wait_ready(&item, 1);
        while (zmq_recv(sock, &reply, sizeof reply, ZMQ_DONTWAIT) >= 0) got++;
    }
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: client FRONTEND throughput|latency N\n");
        return 2;
    }
    uint64_t n = strtoull(argv[3], NULL, 10), next = 1;
    void *ctx = zmq_ctx_new();
    void *sock = zmq_socket(ctx, ZMQ_DEALER);
    unlimited(sock);
    if (zmq_connect(sock, argv[1]) != 0) die("connect");
    round_trips(sock, 200, &next); /* warm-up, not timed */
    if (strcmp(argv[2], "throughput") == 0) {
        double start = now_s();
        round_trips(sock, n, &next);
        double wall = now_s() - start;
        printf("{\"workload\":\"throughput\",\"tasks\":%llu,\"wall_s\":%.6f,\"tasks_per_s\":%.1f}\n",
               (unsigned long long)n, wall, n / wall);
    } else {
        double *lat = malloc(sizeof(double) * n);
        double start = now_s();
        for (uint64_t i = 0; i < n; i++) {
            double t0 = now_s();
            round_trips(sock, 1, &next);
            lat[i] = (now_s() - t0) * 1e6;
        }
        double wall = now_s() - start;
        qsort(lat, n, sizeof(double), cmp);
        printf("{\"workload\":\"latency\",\"tasks\":%llu,\"wall_s\":%.6f,\"p50_us\":%.1f,\"p99_us\":%.1f}\n",
               (unsigned long long)n, wall, lat[n / 2], lat[(size_t)(n * 0.99)]);
    }
    return 0;
}
