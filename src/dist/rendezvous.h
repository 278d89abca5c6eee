/* src/dist/rendezvous.h — NCCL's id from rank 0 to every rank over TCP,
   where there is no MPI. */

/* ---- the rendezvous without MPI: NCCL's id from rank 0 over TCP, as torchrun's
   env:// store. Rank 0 listens at MASTER_PORT; every other rank connects to
   MASTER_ADDR:MASTER_PORT (retrying while rank 0 is not up yet), says its rank
   and world size, and receives the id once every rank has come. Each side
   gives up after the timeout with an error naming the address. */
#if !defined(GPUDL_MPI) && defined(GDL__OS_SOCKETS)
#define GDL__HAVE_RDV 1

enum { GDL__RDV_HELLO = 12, GDL__RDV_REPLY = 12 + GDL_COMM_ID_BYTES };

static void gdl__put32(unsigned char *b, uint32_t v) {
    b[0] = (unsigned char)(v >> 24), b[1] = (unsigned char)(v >> 16), b[2] = (unsigned char)(v >> 8),
    b[3] = (unsigned char)v;
}
static uint32_t gdl__get32(const unsigned char *b) {
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | (uint32_t)b[3];
}

/* gdl__rendezvous on rank 0: waits for every other rank at MASTER_PORT (until deadline), then sends each the id. */
static int gdl__rdv_serve(const char *op, int world, const unsigned char *id, double timeout, double deadline,
                          const char *addr, long port) {
    unsigned char hello[GDL__RDV_HELLO], reply[GDL__RDV_REPLY];
    int got = 0, i, rc = -1;
    gdl__sock lfd, *fds;
    char *seen;
    if (!(fds = (gdl__sock *)GPUDL_MALLOC(sizeof(gdl__sock) * (size_t)world)) ||
        !(seen = (char *)GPUDL_MALLOC((size_t)world))) {
        GPUDL_FREE(fds);
        gdl__set_error("%s: out of memory", op);
        return -1;
    }
    memset(seen, 0, (size_t)world);
    for (i = 0; i < world; i++) fds[i] = GDL__SOCK_NONE; /* by rank */
    if (gdl__os_sock_listen(&lfd, (int)port, world) != 0) {
        gdl__set_error("%s: rank 0 cannot listen at MASTER_PORT=%ld: %s", op, port, gdl__os_sock_strerror(errno));
        GPUDL_FREE(fds), GPUDL_FREE(seen);
        return -1;
    }
    while (got < world - 1) {
        gdl__sock fd = GDL__SOCK_NONE;
        int r, w;
        if (gdl_now() >= deadline) {
            char missing[200];
            size_t k = 0;
            for (i = 1; i < world && k + 12 < sizeof missing; i++)
                if (!seen[i]) k += (size_t)snprintf(missing + k, sizeof missing - k, "%s%d", k ? ", " : "", i);
            gdl__set_error("%s: rank 0 waited %g s (GPUDL_DIST_TIMEOUT) at MASTER_ADDR=%s MASTER_PORT=%ld: %d of "
                           "%d ranks came; missing: rank %s", op, timeout, addr, port, got + 1, world, missing);
            goto done;
        }
        if (gdl__os_sock_accept(lfd, &fd, deadline) != 0) continue;
        if (gdl__os_sock_io(fd, hello, sizeof hello, 0, gdl_now() + 10 < deadline ? gdl_now() + 10 : deadline) < 0 ||
            memcmp(hello, "gdlR", 4) != 0) {
            gdl__os_sock_close(fd); /* not one of ours (a port scan, a stale job): wait on */
            continue;
        }
        r = (int)gdl__get32(hello + 4), w = (int)gdl__get32(hello + 8);
        if (w != world || r <= 0 || r >= world) {
            memset(reply, 0, sizeof reply);
            gdl__put32(reply, 1);
            gdl__put32(reply + 4, (uint32_t)world);
            (void)gdl__os_sock_io(fd, reply, sizeof reply, 1, gdl_now() + 1);
            gdl__os_sock_close(fd);
            if (w != world) {
                gdl__set_error("%s: rank %d says WORLD_SIZE=%d, rank 0 says %d (MASTER_ADDR=%s MASTER_PORT=%ld)",
                               op, r, w, world, addr, port);
                goto done;
            }
            continue; /* no rank of this job (its launcher checks RANK < WORLD_SIZE): wait on */
        }
        if (seen[r]) { /* a rank that came again (restarted): its newer connection is the one to answer */
            gdl__os_sock_close(fds[r]);
        } else {
            seen[r] = 1;
            got++;
        }
        fds[r] = fd;
        if (got == world - 1) /* a rank that went away since it came (EOF: readable) comes again */
            for (i = 1; i < world; i++)
                if (gdl__os_sock_readable(fds[i])) {
                    gdl__os_sock_close(fds[i]);
                    fds[i] = GDL__SOCK_NONE, seen[i] = 0, got--;
                }
    }
    memset(reply, 0, sizeof reply);
    gdl__put32(reply + 4, (uint32_t)world);
    memcpy(reply + 12, id, GDL_COMM_ID_BYTES);
    rc = 0;
    for (i = 1; i < world; i++)
        if (gdl__os_sock_io(fds[i], reply, sizeof reply, 1, deadline) < 0 && rc == 0) {
            gdl__set_error("%s: rank 0 could not send the job's id to rank %d: %s", op, i,
                           gdl__os_sock_strerror(errno));
            rc = -1;
        }
done:
    for (i = 1; i < world; i++)
        if (fds[i] != GDL__SOCK_NONE) gdl__os_sock_close(fds[i]);
    gdl__os_sock_close(lfd);
    GPUDL_FREE(fds), GPUDL_FREE(seen);
    return rc;
}

/* gdl__rendezvous on the other ranks: reaches rank 0 (until deadline), says who it is, receives the id. */
static int gdl__rdv_join(const char *op, int rank, int world, unsigned char *id, double timeout, double deadline,
                         const char *addr, long port) {
    unsigned char hello[GDL__RDV_HELLO], reply[GDL__RDV_REPLY];
    gdl__sock fd = GDL__SOCK_NONE;
    int rc, e = 0;
    while ((rc = gdl__os_sock_connect(&fd, addr, (int)port, deadline)) != 0) { /* rank 0 may not listen yet */
        e = rc == -2 ? 0 : errno;
        if (gdl_now() + 0.1 > deadline) {
            gdl__set_error("%s: rank %d could not reach rank 0 at MASTER_ADDR=%s MASTER_PORT=%ld within %g s "
                           "(GPUDL_DIST_TIMEOUT): %s", op, rank, addr, port, timeout,
                           rc == -2 ? "MASTER_ADDR does not resolve to an address"
#ifdef GDL__OS_SOCK_NUMERIC_ONLY
                                      " (this build takes numeric IPv4 addresses only: define _POSIX_C_SOURCE "
                                      "200112L or more for host names)"
#endif
                                    : gdl__os_sock_strerror(e));
            return -1;
        }
        gdl__os_sleep_ms(100);
    }
    memcpy(hello, "gdlR", 4);
    gdl__put32(hello + 4, (uint32_t)rank);
    gdl__put32(hello + 8, (uint32_t)world);
    if (gdl__os_sock_io(fd, hello, sizeof hello, 1, deadline) < 0 ||
        gdl__os_sock_io(fd, reply, sizeof reply, 0, deadline) < 0) {
        e = errno;
        gdl__os_sock_close(fd);
        gdl__set_error("%s: rank %d reached MASTER_ADDR=%s MASTER_PORT=%ld but got no answer within %g s "
                       "(GPUDL_DIST_TIMEOUT): %s", op, rank, addr, port, timeout,
                       e == EPIPE ? "rank 0 gave up (some rank never came)" : gdl__os_sock_strerror(e));
        return -1;
    }
    gdl__os_sock_close(fd);
    if (gdl__get32(reply) != 0) {
        gdl__set_error("%s: rank 0 at MASTER_ADDR=%s MASTER_PORT=%ld refused rank %d: it says WORLD_SIZE=%u, this "
                       "rank %d", op, addr, port, rank, gdl__get32(reply + 4), world);
        return -1;
    }
    memcpy(id, reply + 12, GDL_COMM_ID_BYTES);
    return 0;
}

/* src/dist/cluster.h: MASTER_ADDR / MASTER_PORT, or what Kubeflow or srun's node list give ("" unset); 0 / -1 */
static int gdl__cluster_master(const char *op, char *addr, size_t alen, char *port, size_t plen);

/* Rank 0 hands `id` to every rank; the others receive it. 0 / -1 + error naming MASTER_ADDR, MASTER_PORT. */
static int gdl__rendezvous(const char *op, int rank, int world, unsigned char *id, double timeout) {
    char addr[256], ps[32], *end;
    long port;
    double deadline = gdl_now() + timeout;
    if (gdl__cluster_master(op, addr, sizeof addr, ps, sizeof ps) < 0) return -1;
    if (!addr[0] || !ps[0]) {
        gdl__set_error("%s: %s is not set: the %d processes of a job without MPI meet at MASTER_ADDR:MASTER_PORT "
                       "(rank 0's host and a free port, as torchrun sets them)", op, !addr[0] ?
                       "MASTER_ADDR" : "MASTER_PORT", world);
        return -1;
    }
    port = strtol(ps, &end, 10);
    if (!ps[0] || *end || port < 1 || port > 65535) {
        gdl__set_error("%s: MASTER_PORT='%s' is not a port number in [1, 65535]", op, ps);
        return -1;
    }
    return rank == 0 ? gdl__rdv_serve(op, world, id, timeout, deadline, addr, port)
                     : gdl__rdv_join(op, rank, world, id, timeout, deadline, addr, port);
}
#endif

/* The communicator of CUDA device dev, made at the first collective on it (NCCL's id was handed round
   at init). The GPU backend, made current; NULL + error. */
