/* Each GID's network device, as a program reads it: ibv_query_gid_ex and ibv_query_gid_table
 * give ndev_ifindex, if_indextoname names it. Prints "gid N ndev NAME" per entry of port 1 of
 * the first device (the table's entries, then indices 0 and 1 by ibv_query_gid_ex). */
#include <infiniband/verbs.h>
#include <net/if.h>
#include <stdio.h>

static const char *name_of(unsigned idx, char *buf) {
	return idx && if_indextoname(idx, buf) ? buf : "(none)";
}

int main(void) {
	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0]) return 1;
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx) return 1;
	struct ibv_gid_entry table[8];
	ssize_t n = ibv_query_gid_table(ctx, table, 8, 0);
	if (n < 0) return 1;
	char buf[IF_NAMESIZE];
	for (ssize_t i = 0; i < n; i++)
		printf("table %u ndev %s\n", table[i].gid_index, name_of(table[i].ndev_ifindex, buf));
	for (unsigned i = 0; i < 2; i++) {
		struct ibv_gid_entry e;
		if (ibv_query_gid_ex(ctx, 1, i, &e, 0)) return 1;
		printf("gid %u ndev %s\n", i, name_of(e.ndev_ifindex, buf));
	}
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
