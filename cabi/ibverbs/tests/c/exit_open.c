/*
 * exit_open.c - a program that ends with its device still open, as many do (exit() from
 * main, an error path): softverbs removes its port's files from the fabric when it exits, as
 * the kernel releases an rxe device's resources. It opens a device, registers memory, makes a
 * QP, forks a child that exits at once (a fork child removes nothing of its parent's), counts
 * the fabric's files before and after the child, and exits without closing anything.
 * tests/exit.rs runs it with direct reach on and off and then looks at the fabric directory.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <infiniband/verbs.h>

/* The fabric's files but its lock. */
static int files(void)
{
	DIR *d = opendir(getenv("SOFTVERBS_FABRIC"));
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = list ? ibv_open_device(list[0]) : NULL;
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	struct ibv_cq *cq = ctx ? ibv_create_cq(ctx, 4, NULL, NULL, 0) : NULL;
	char *buf = malloc(4096);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_qp_init_attr qi = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *qp = mr ? ibv_create_qp(pd, &qi) : NULL;
	if (!qp)
		return 2;
	int before = files();
	pid_t pid = fork();
	if (pid == 0)
		exit(0);
	waitpid(pid, NULL, 0);
	printf("port files while open: %s\n", before > 0 ? "some" : "none");
	printf("after a fork child exited: %s\n", files() == before ? "the same" : "changed");
	exit(0);
}
