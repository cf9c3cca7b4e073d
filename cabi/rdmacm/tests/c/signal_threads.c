/* signal_threads.c: a program's signals are its own threads'. rxe's NIC and the kernel's CM run
 * in the kernel, so a process-directed signal (kill, alarm) that the program blocks in every
 * thread it made stays pending until it unblocks it, and then runs its handler on its own
 * thread. softverbs starts threads inside the program (a device's NIC thread, the CM's clock
 * and wire threads): they must not take the program's signals.
 * Usage: signal_threads PORT
 * The device opened with a QP, the CM used (an address resolved on loopback, a listener), then
 * the program blocks SIGUSR1 (the threads softverbs started do not inherit that), sends itself
 * SIGUSR1 and waits 300 ms: the handler must not have run and the signal must be pending;
 * unblocked, the handler runs on this thread. */
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <dirent.h>
#include "cm_common.h"

static volatile sig_atomic_t ran;
static volatile pid_t ran_on;

static void on_usr1(int sig)
{
	(void)sig;
	ran++;
	ran_on = (pid_t)syscall(SYS_gettid);
}

/* Threads of this process now. */
static int threads(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	CHECK(d);
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

int main(int argc, char **argv)
{
	struct sockaddr_in any = { .sin_family = AF_INET }, dst = { .sin_family = AF_INET };
	struct sigaction sa = { .sa_handler = on_usr1 };
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 1, .max_recv_wr = 1,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct rdma_cm_id *listen, *act;
	sigset_t usr1, pending;

	CHECK(argc == 2);
	any.sin_port = dst.sin_port = htons(atoi(argv[1]));
	dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sigemptyset(&sa.sa_mask);
	CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);

	CHECK(list = ibv_get_device_list(NULL));
	CHECK(list[0]);
	CHECK(ctx = ibv_open_device(list[0]));
	CHECK(pd = ibv_alloc_pd(ctx));
	CHECK(cq = ibv_create_cq(ctx, 4, NULL, NULL, 0));
	ia.send_cq = ia.recv_cq = cq;
	CHECK(qp = ibv_create_qp(pd, &ia));
	CHECK(ch = rdma_create_event_channel());
	CHECK(rdma_create_id(ch, &listen, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_bind_addr(listen, (struct sockaddr *)&any) == 0);
	CHECK(rdma_listen(listen, 1) == 0);
	CHECK(rdma_create_id(ch, &act, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_resolve_addr(act, NULL, (struct sockaddr *)&dst, 2000) == 0);
	expect(RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(rdma_resolve_route(act, 2000) == 0);
	expect(RDMA_CM_EVENT_ROUTE_RESOLVED);
	printf("threads besides the program's: %s\n", threads() > 1 ? "some" : "none");
	/* Blocked now, in the one thread the program made: threads started before do not inherit
	 * the mask (a program that blocks its signals after its setup). */
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	CHECK(pthread_sigmask(SIG_BLOCK, &usr1, NULL) == 0);

	CHECK(kill(getpid(), SIGUSR1) == 0);
	usleep(300000);
	CHECK(sigpending(&pending) == 0);
	printf("while blocked: handler ran %d times, SIGUSR1 %s\n", (int)ran,
	       sigismember(&pending, SIGUSR1) ? "pending" : "not pending");
	CHECK(pthread_sigmask(SIG_UNBLOCK, &usr1, NULL) == 0);
	printf("unblocked: handler ran %d times, on %s\n", (int)ran,
	       ran_on == (pid_t)syscall(SYS_gettid) ? "this thread" : "another thread");

	CHECK(rdma_destroy_id(act) == 0);
	CHECK(rdma_destroy_id(listen) == 0);
	rdma_destroy_event_channel(ch);
	CHECK(ibv_destroy_qp(qp) == 0);
	CHECK(ibv_destroy_cq(cq) == 0);
	CHECK(ibv_dealloc_pd(pd) == 0);
	CHECK(ibv_close_device(ctx) == 0);
	ibv_free_device_list(list);
	printf("done\n");
	return 0;
}
