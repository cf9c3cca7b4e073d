/* An MPI program that checks what it moves: a ping-pong between ranks 0 and 1 (each message
 * a pattern of its size and iteration, checked byte by byte on arrival and echoed back), then
 * an allreduce over every rank (the sum of each rank's vector, checked element by element).
 * Prints "pingpong ok <iterations>" and "allreduce ok <ranks>" from rank 0; exits 1 on the
 * first wrong byte or element, naming it. Used by sim/cli/tests/ucx.rs through softverbs run. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char pat(int iter, size_t i) { return (unsigned char)(iter * 31 + i * 7 + 1); }

int main(int argc, char **argv) {
    int rank, size, iters = 200;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size >= 2 && rank < 2) {
        size_t sizes[] = {1, 64, 4096, 65536, 1 << 20};
        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
            size_t n = sizes[s];
            unsigned char *buf = malloc(n);
            for (int it = 0; it < iters; it++) {
                if (rank == 0) {
                    for (size_t i = 0; i < n; i++) buf[i] = pat(it, i);
                    MPI_Send(buf, (int)n, MPI_BYTE, 1, it, MPI_COMM_WORLD);
                    memset(buf, 0, n);
                    MPI_Recv(buf, (int)n, MPI_BYTE, 1, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    memset(buf, 0, n);
                    MPI_Recv(buf, (int)n, MPI_BYTE, 0, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                }
                for (size_t i = 0; i < n; i++) {
                    if (buf[i] != pat(it, i)) {
                        fprintf(stderr, "rank %d: size %zu iteration %d byte %zu is %u, not %u\n",
                                rank, n, it, i, buf[i], pat(it, i));
                        MPI_Abort(MPI_COMM_WORLD, 1);
                    }
                }
                if (rank == 1) MPI_Send(buf, (int)n, MPI_BYTE, 0, it, MPI_COMM_WORLD);
            }
            free(buf);
        }
        if (rank == 0) printf("pingpong ok %d\n", iters);
    }
    enum { N = 100000 };
    long *v = malloc(N * sizeof(long)), *sum = malloc(N * sizeof(long));
    for (long i = 0; i < N; i++) v[i] = (rank + 1) * i + rank;
    MPI_Allreduce(v, sum, N, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    long ranks = size, base = ranks * (ranks + 1) / 2, extra = ranks * (ranks - 1) / 2;
    for (long i = 0; i < N; i++) {
        if (sum[i] != base * i + extra) {
            fprintf(stderr, "rank %d: allreduce element %ld is %ld, not %ld\n", rank, i, sum[i],
                    base * i + extra);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    if (rank == 0) printf("allreduce ok %d\n", size);
    free(v);
    free(sum);
    MPI_Finalize();
    return 0;
}
