/* An MPI ping-pong timed as perftest's ib_send_lat times its own: ranks 0 and 1 exchange
 * SIZE-byte messages (MPI_Send / MPI_Recv) ITERS times after 1000 warm-up round trips; rank 0
 * reads the clock around each round trip and prints the median half round trip in
 * microseconds (ib_send_lat's t_typical), and the minimum, as "SIZE ITERS t_min t_typical".
 * Every received message is checked (its first and last byte). Built and run by
 * scripts/mpi-vs-perftest.sh. Usage: mpi_lat [SIZE [ITERS]] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	int rank, size, n, iters, warm = 1000;
	unsigned char *buf;
	double *rtt;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	n = argc > 1 ? atoi(argv[1]) : 8;
	iters = argc > 2 ? atoi(argv[2]) : 20000;
	if (size != 2 || n < 1 || iters < 1) {
		if (rank == 0)
			fprintf(stderr, "mpi_lat: needs 2 ranks, SIZE >= 1, ITERS >= 1\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	buf = malloc(n);
	rtt = malloc(sizeof(double) * iters);
	for (int it = -warm; it < iters; it++) {
		unsigned char tag = (unsigned char)it;
		if (rank == 0) {
			double t0 = MPI_Wtime();
			buf[0] = buf[n - 1] = tag;
			MPI_Send(buf, n, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
			MPI_Recv(buf, n, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			if (it >= 0)
				rtt[it] = MPI_Wtime() - t0;
		} else {
			MPI_Recv(buf, n, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			MPI_Send(buf, n, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
		}
		if (buf[0] != tag || buf[n - 1] != tag) {
			fprintf(stderr, "mpi_lat: rank %d iteration %d: wrong bytes\n", rank, it);
			MPI_Abort(MPI_COMM_WORLD, 1);
		}
	}
	if (rank == 0) {
		qsort(rtt, iters, sizeof(double), cmp);
		printf("%d %d %.2f %.2f\n", n, iters, rtt[0] * 1e6 / 2, rtt[iters / 2] * 1e6 / 2);
	}
	free(buf);
	free(rtt);
	MPI_Finalize();
	return 0;
}
