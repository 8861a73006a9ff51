/* The compiled event core of the congestion-aware runtime.
 *
 * It executes a congestion_plan.Plan exactly as the Python reference engine (congestion._Engine on
 * phases.PhaseEngine) does, event for event, so both give identical results (tests compare them):
 * - phases become eligible on a service group when its last member has them ready, and each group serves them in
 *   one shared order (FIFO by ready time, or smallest chunk first); a server (NPU, dimension) runs up to `active`
 *   phases at once (phases.GroupOrder);
 * - a finished phase releases the chunk's next stage, and collectives waiting on it (phases.Chains);
 * - a step injects its messages into their first links; every link serves a FIFO queue; a hop ends `latency` after
 *   the head (cut-through) or the tail (store-and-forward) left the link; a step ends when its own messages are
 *   delivered (those it waits for: msg_src_step >= 0) and its receives have arrived, plus its reduction time
 *   (step_reduce_ns: ASTRA-sim's local-mem-bw).
 *   A message is delivered endpoint_ns after its tail arrives (ASTRA-sim's endpoint-delay; links are free then).
 * Events of one instant run in the order they were created; admissions follow in server order, then links start
 * transfers in link order.
 *
 * Interface: simulate(arrays: dict of int64/float64 numpy arrays named as the Plan's attributes, P, NS, M, L, G, K,
 * S, ndims, active, scf, cut_through, symmetric, timeline, endpoint_ns) -> (rec_pid, rec_start, rec_end, link_time, link_bytes,
 * served, transfers, begun, started), the arrays as bytes-backed buffers wrapped by the caller.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int64_t i64;
typedef int32_t i32;

/* ---- growable arrays and heaps ---------------------------------------------------------------------------- */

enum { PHASE_DONE = 0, LINK_FREE = 1, HOP_DONE = 2, STEP_DONE = 3 };

/* 24 bytes: the kind rides in the two low bits of the creation number, which orders events of one instant.
 * PHASE_DONE: a = phase; LINK_FREE: a = link; HOP_DONE: a = message, b = hop; STEP_DONE: a = step */
typedef struct { double t; i64 seq_kind; i32 a, b; } Event;
typedef struct { double size, ready; i64 flow, coll, stage, kid; } Prio;  /* eligible phase of a group */

typedef struct { i64 *v; i64 n, cap; } Vec;

static int grow(void **v, i64 *cap, i64 need, size_t item) {
    if (need <= *cap) return 0;
    i64 c = *cap ? *cap * 2 : 16;
    while (c < need) c *= 2;
    void *p = realloc(*v, (size_t)c * item);
    if (!p) return -1;
    *v = p;
    *cap = c;
    return 0;
}

static int vec_push(Vec *s, i64 x) {
    if (grow((void **)&s->v, &s->cap, s->n + 1, sizeof(i64))) return -1;
    s->v[s->n++] = x;
    return 0;
}

static inline int ev_less(const Event *x, const Event *y) {
    return x->t < y->t || (x->t == y->t && x->seq_kind < y->seq_kind);
}

static inline int prio_less(const Prio *x, const Prio *y) {
    if (x->size != y->size) return x->size < y->size;
    if (x->ready != y->ready) return x->ready < y->ready;
    if (x->flow != y->flow) return x->flow < y->flow;
    if (x->coll != y->coll) return x->coll < y->coll;
    return x->stage < y->stage;
}

/* a binary min-heap of T ordered by less(): Heap, Heap_push, Heap_pop */
#define DEFINE_HEAP(Heap, T, less)                                                                           \
    typedef struct { T *v; i64 n, cap; } Heap;                                                               \
    static int Heap##_push(Heap *h, T e) {                                                                   \
        if (grow((void **)&h->v, &h->cap, h->n + 1, sizeof(T))) return -1;                                  \
        i64 i = h->n++;                                                                                      \
        while (i > 0) {                                                                                      \
            i64 p = (i - 1) / 2;                                                                             \
            if (!less(&e, &h->v[p])) break;                                                                  \
            h->v[i] = h->v[p];                                                                               \
            i = p;                                                                                           \
        }                                                                                                    \
        h->v[i] = e;                                                                                         \
        return 0;                                                                                            \
    }                                                                                                        \
    static T Heap##_pop(Heap *h) {                                                                           \
        T top = h->v[0], last = h->v[--h->n];                                                                \
        i64 i = 0;                                                                                           \
        for (;;) {                                                                                           \
            i64 c = 2 * i + 1;                                                                               \
            if (c >= h->n) break;                                                                            \
            if (c + 1 < h->n && less(&h->v[c + 1], &h->v[c])) c++;                                           \
            if (!less(&h->v[c], &last)) break;                                                               \
            h->v[i] = h->v[c];                                                                               \
            i = c;                                                                                           \
        }                                                                                                    \
        if (h->n) h->v[i] = last;                                                                            \
        return top;                                                                                          \
    }

DEFINE_HEAP(EventHeap, Event, ev_less)
DEFINE_HEAP(PrioHeap, Prio, prio_less)

static int cmp_i64(const void *a, const void *b) {
    i64 x = *(const i64 *)a, y = *(const i64 *)b;
    return (x > y) - (x < y);
}

/* ---- the plan's arrays -------------------------------------------------------------------------------------- */

typedef struct {
    const i64 *sim, *key_coll, *key_flow, *key_stage, *key_dim, *nstages, *chunks, *key_base, *chunk_base;
    const i64 *step_start, *class_bytes, *server_group, *member, *member_start, *group_size, *group_local;
    const i64 *count_base, *cons_start, *cons, *cons_per_chunk, *ndeps;
    /* one entry per step or per message: int32 (congestion_plan.py) */
    const i32 *step_phase, *step_send, *step_left, *msg_src_step, *msg_dst_step, *msg_class, *route_start, *route;
    const double *class_ns, *link_lat, *phase_size, *step_reduce_ns; /* step_reduce_ns: empty when off */
} Plan;

typedef struct {
    Plan p;
    i64 P, NS, M, L, G, K, S, nd, active, ncoll, nchunk_total, route_len;
    int scf, cut_through, symmetric, timeline, reduce_ns, single_hop;
    double endpoint_ns;            /* added to each message's delivery, not to any link's occupancy */
    /* state */
    EventHeap events;
    i64 seq;
    PrioHeap *eligible;            /* per group */
    Vec *order;                    /* per group: keys in service order */
    i64 *position, *running;       /* per server */
    i64 *count;                    /* per (group, key): members ready */
    double *count_time;            /*                 latest ready time */
    i64 *waiting, *done_all;       /* per (npu, coll, flow) / (npu, coll) */
    i32 *left;                     /* per step: own sends not yet delivered + receives not yet arrived */
    char *begun, *started;         /* per step / per phase */
    double *phase_start;
    i32 *next_in_queue, *hop;      /* per message: link FIFOs threaded through messages (one queue at a time) and
                                    * the hop it queues for (none kept when every message takes one hop) */
    i64 *qhead, *qtail;            /* per link */
    char *busy, *link_touched, *server_touched;
    Vec touched_links, touched_servers;
    /* outputs */
    i64 *rec_pid, nrec;
    double *rec_start, *rec_end, *link_time;
    i64 *link_bytes, served;
    double *xfer;  /* timeline: (link, start, end, message) per transfer */
} Sim;

/* where message mid's route starts (route_start is empty when every message takes one hop) */
static inline i64 rstart(const Sim *s, i64 mid) { return s->single_hop ? mid : s->p.route_start[mid]; }

static int push_event(Sim *s, double t, int kind, i64 a, i64 b) {
    Event e = {t, (s->seq++ << 2) | kind, (i32)a, (i32)b};
    return EventHeap_push(&s->events, e);
}

static i64 server_of(Sim *s, i64 si, i64 dim) { return si * (s->nd + 1) + dim + 1; }

static int touch_server(Sim *s, i64 sid) {
    if (s->server_touched[sid]) return 0;
    s->server_touched[sid] = 1;
    return vec_push(&s->touched_servers, sid);
}

static int touch_link(Sim *s, i64 link) {
    if (s->link_touched[link]) return 0;
    s->link_touched[link] = 1;
    return vec_push(&s->touched_links, link);
}

/* phases.GroupOrder.ready: key `kid` is ready on simulated NPU si at `now` */
static int ready(Sim *s, i64 si, i64 kid, double now) {
    const Plan *p = &s->p;
    i64 dim = p->key_dim[kid];
    i64 g = p->server_group[server_of(s, si, dim)];
    i64 c = p->count_base[kid] + p->group_local[g];
    s->count[c] += 1;
    if (now > s->count_time[c]) s->count_time[c] = now;
    if (s->count[c] < p->group_size[g]) return 0;
    Prio e = {s->scf ? p->phase_size[si * s->K + kid] : 0.0, s->count_time[c], p->key_flow[kid], p->key_coll[kid],
              p->key_stage[kid], kid};
    if (PrioHeap_push(&s->eligible[g], e)) return -1;
    for (i64 m = p->member_start[g]; m < p->member_start[g + 1]; m++)
        if (touch_server(s, p->member[m])) return -1;
    return 0;
}

/* phases.Chains.finished, feeding each released key to ready() */
static int finished(Sim *s, i64 si, i64 kid, double now) {
    const Plan *p = &s->p;
    i64 c = p->key_coll[kid], f = p->key_flow[kid], st = p->key_stage[kid];
    if (st + 1 < p->nstages[c]) return ready(s, si, kid + 1, now);
    i64 done = ++s->done_all[si * s->ncoll + c];
    for (i64 j = p->cons_start[c]; j < p->cons_start[c + 1]; j++) {
        i64 consumer = p->cons[j], lo = f, hi = f + 1;
        if (!p->cons_per_chunk[j]) {
            if (done < p->chunks[c]) continue;
            lo = 0;
            hi = p->chunks[consumer];
        }
        for (i64 g = lo; g < hi; g++) {
            i64 w = si * s->nchunk_total + p->chunk_base[consumer] + g;
            if (--s->waiting[w] == 0 && ready(s, si, p->key_base[consumer] + g * p->nstages[consumer], now))
                return -1;
        }
    }
    return 0;
}

static int check_step(Sim *s, i64 g, double now) {
    if (!s->begun[g] || s->left[g]) return 0;
    s->begun[g] = 0;
    return push_event(s, now + (s->reduce_ns ? s->p.step_reduce_ns[g] : 0.0), STEP_DONE, g, 0);
}

static int enqueue(Sim *s, i64 mid, i64 hop) {
    i64 link = s->p.route[rstart(s, mid) + hop];
    if (!s->single_hop) s->hop[mid] = (i32)hop;
    s->next_in_queue[mid] = -1;
    if (s->qtail[link] < 0) s->qhead[link] = mid;
    else s->next_in_queue[s->qtail[link]] = (i32)mid;
    s->qtail[link] = mid;
    return touch_link(s, link);
}

static int start_step(Sim *s, i64 g, double now) {
    const Plan *p = &s->p;
    s->begun[g] = 1;
    for (i64 mid = p->step_send[g]; mid < p->step_send[g + 1]; mid++)  /* messages are numbered in injection order */
        if (enqueue(s, mid, 0)) return -1;
    return check_step(s, g, now);
}

static int admit(Sim *s, double now) {
    const Plan *p = &s->p;
    Vec *ts = &s->touched_servers;
    qsort(ts->v, (size_t)ts->n, sizeof(i64), cmp_i64);
    for (i64 i = 0; i < ts->n; i++) {
        i64 sid = ts->v[i], si = sid / (s->nd + 1);
        s->server_touched[sid] = 0;
        i64 g = p->server_group[sid];
        while (s->running[sid] < s->active) {
            Vec *ord = &s->order[g];
            if (s->position[sid] >= ord->n) {
                if (!s->eligible[g].n) break;
                if (vec_push(ord, PrioHeap_pop(&s->eligible[g]).kid)) return -1;
            }
            i64 kid = ord->v[s->position[sid]++];
            s->running[sid] += 1;
            i64 pid = si * s->K + kid;
            s->started[pid] = 1;
            s->phase_start[pid] = now;
            if (p->step_start[pid + 1] > p->step_start[pid]) {
                if (start_step(s, p->step_start[pid], now)) return -1;
            } else if (push_event(s, now, PHASE_DONE, pid, 0)) {
                return -1;
            }
        }
    }
    ts->n = 0;
    return 0;
}

static int serve(Sim *s, double now) {
    const Plan *p = &s->p;
    Vec *tl = &s->touched_links;
    qsort(tl->v, (size_t)tl->n, sizeof(i64), cmp_i64);
    for (i64 i = 0; i < tl->n; i++) {
        i64 link = tl->v[i];
        s->link_touched[link] = 0;
        if (s->busy[link] || s->qhead[link] < 0) continue;
        i64 mid = s->qhead[link], hop = s->single_hop ? 0 : s->hop[mid], pos = rstart(s, mid) + hop;
        s->qhead[link] = s->next_in_queue[mid];
        if (s->qhead[link] < 0) s->qtail[link] = -1;
        i64 cls = p->msg_class[mid];
        double ns = p->class_ns[cls], end = now + ns;
        s->busy[link] = 1;
        if (s->timeline) {
            double *x = s->xfer + 4 * s->served;
            x[0] = (double)link;
            x[1] = now;
            x[2] = end;
            x[3] = (double)mid;
        }
        s->served += 1;
        s->link_time[link] += ns;
        s->link_bytes[link] += p->class_bytes[cls];
        if (push_event(s, end, LINK_FREE, link, 0)) return -1;
        int last = pos + 1 == rstart(s, mid + 1);
        double ahead = (s->cut_through && !last) ? now : end;
        if (push_event(s, ahead + p->link_lat[link] + (last ? s->endpoint_ns : 0.0), HOP_DONE, mid, hop)) return -1;
    }
    tl->n = 0;
    return 0;
}

static int on_event(Sim *s, Event e, double now) {
    const Plan *p = &s->p;
    switch ((int)(e.seq_kind & 3)) {
    case PHASE_DONE: {
        i64 pid = e.a, si = pid / s->K, kid = pid % s->K;
        s->rec_pid[s->nrec] = pid;
        s->rec_start[s->nrec] = s->phase_start[pid];
        s->rec_end[s->nrec] = now;
        s->nrec++;
        i64 sid = server_of(s, si, p->key_dim[kid]);
        s->running[sid] -= 1;
        if (touch_server(s, sid)) return -1;
        return finished(s, si, kid, now);
    }
    case LINK_FREE:
        s->busy[e.a] = 0;
        return touch_link(s, e.a);
    case HOP_DONE: {
        i64 mid = e.a, hop = e.b;
        if (rstart(s, mid) + hop + 1 < rstart(s, mid + 1)) return enqueue(s, mid, hop + 1);
        i64 g = p->msg_src_step[mid];  /* delivered; -1: its step ended once it was sent (ends_on_send) */
        if (g >= 0) {
            s->left[g] -= 1;
            if (check_step(s, g, now)) return -1;
        }
        i64 r = p->msg_dst_step[mid];
        if (r >= 0) {
            s->left[r] -= 1;
            return check_step(s, r, now);
        }
        return 0;
    }
    default: { /* STEP_DONE */
        i64 g = e.a, pid = p->step_phase[g];
        if (g + 1 < p->step_start[pid + 1]) return start_step(s, g + 1, now);
        return push_event(s, now, PHASE_DONE, pid, 0);
    }
    }
}

static int run_sim(Sim *s) {
    const Plan *p = &s->p;
    for (i64 si = 0; si < s->S; si++)
        for (i64 c = 0; c < s->ncoll; c++)
            for (i64 f = 0; f < p->chunks[c]; f++) {
                s->waiting[si * s->nchunk_total + p->chunk_base[c] + f] = p->ndeps[c];
                if (!p->ndeps[c] && ready(s, si, p->key_base[c] + f * p->nstages[c], 0.0)) return -1;
            }
    if (admit(s, 0.0) || serve(s, 0.0)) return -1;
    while (s->events.n) {
        double now = s->events.v[0].t;
        while (s->events.n && s->events.v[0].t == now)
            if (on_event(s, EventHeap_pop(&s->events), now)) return -1;
        if (admit(s, now) || serve(s, now)) return -1;
    }
    return 0;
}

/* ---- Python glue -------------------------------------------------------------------------------------------- */

static const void *array(PyObject *arrays, const char *name, Py_buffer *views, int *nviews, size_t item) {
    PyObject *o = PyDict_GetItemString(arrays, name);
    if (!o) {
        PyErr_Format(PyExc_KeyError, "plan array %s missing", name);
        return NULL;
    }
    Py_buffer *v = &views[*nviews];
    if (PyObject_GetBuffer(o, v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    (*nviews)++;
    if ((size_t)v->itemsize != item) {
        PyErr_Format(PyExc_TypeError, "plan array %s has items of %zd bytes, expected %zu", name, v->itemsize, item);
        return NULL;
    }
    return v->len ? v->buf : (const void *)"";
}

static void *zalloc(i64 n, size_t item) { return calloc((size_t)(n > 0 ? n : 1), item); }

static PyObject *bytes_of(const void *v, i64 n, size_t item) {
    return PyBytes_FromStringAndSize((const char *)v, (Py_ssize_t)((size_t)n * item));
}

static PyObject *simulate(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *arrays;
    Sim s;
    memset(&s, 0, sizeof s);
    if (!PyArg_ParseTuple(args, "O!LLLLLLLLLiiiid", &PyDict_Type, &arrays, &s.P, &s.NS, &s.M, &s.L, &s.G, &s.K, &s.S,
                          &s.nd, &s.active, &s.scf, &s.cut_through, &s.symmetric, &s.timeline, &s.endpoint_ns))
        return NULL;
    Py_buffer views[40];
    int nv = 0;
    PyObject *result = NULL;
    Plan *p = &s.p;
#define I(name) (p->name = (const i64 *)array(arrays, #name, views, &nv, 8)) == NULL
#define J(name) (p->name = (const i32 *)array(arrays, #name, views, &nv, 4)) == NULL
#define D(name) (p->name = (const double *)array(arrays, #name, views, &nv, 8)) == NULL
    if (I(sim) || I(key_coll) || I(key_flow) || I(key_stage) || I(key_dim) || I(nstages) || I(chunks) ||
        I(key_base) || I(chunk_base) || I(step_start) || I(class_bytes) || I(server_group) || I(member) ||
        I(member_start) || I(group_size) || I(group_local) || I(count_base) || I(cons_start) || I(cons) ||
        I(cons_per_chunk) || I(ndeps) || J(step_phase) || J(step_send) || J(step_left) || J(msg_src_step) ||
        J(msg_dst_step) || J(msg_class) || J(route_start) || J(route) || D(class_ns) || D(link_lat) ||
        D(phase_size) || D(step_reduce_ns))
        goto done;
#undef I
#undef J
#undef D
    PyObject *nst = PyDict_GetItemString(arrays, "nstages");
    s.ncoll = PyObject_Length(nst);
    s.nchunk_total = p->chunk_base[s.ncoll];
    s.single_hop = PyObject_Length(PyDict_GetItemString(arrays, "route_start")) == 0;
    s.route_len = rstart(&s, s.M);
    s.reduce_ns = PyObject_Length(PyDict_GetItemString(arrays, "step_reduce_ns")) > 0;
    i64 servers = s.S * (s.nd + 1), counts = p->count_base[s.K];
    s.eligible = zalloc(s.G, sizeof(PrioHeap));
    s.order = zalloc(s.G, sizeof(Vec));
    s.position = zalloc(servers, 8);
    s.running = zalloc(servers, 8);
    s.server_touched = zalloc(servers, 1);
    s.count = zalloc(counts, 8);
    s.count_time = zalloc(counts, 8);
    s.waiting = zalloc(s.S * s.nchunk_total, 8);
    s.done_all = zalloc(s.S * s.ncoll, 8);
    s.left = zalloc(s.NS, 4);
    s.begun = zalloc(s.NS, 1);
    s.started = zalloc(s.P, 1);
    s.phase_start = zalloc(s.P, 8);
    s.next_in_queue = zalloc(s.M, 4);
    s.hop = zalloc(s.single_hop ? 0 : s.M, 4);
    s.qhead = zalloc(s.L, 8);
    s.qtail = zalloc(s.L, 8);
    s.busy = zalloc(s.L, 1);
    s.link_touched = zalloc(s.L, 1);
    s.rec_pid = zalloc(s.P, 8);
    s.rec_start = zalloc(s.P, 8);
    s.rec_end = zalloc(s.P, 8);
    s.link_time = zalloc(s.L, 8);
    s.link_bytes = zalloc(s.L, 8);
    s.xfer = zalloc(s.timeline ? 4 * s.route_len : 1, 8);
    if (!s.eligible || !s.order || !s.position || !s.running || !s.server_touched || !s.count || !s.count_time ||
        !s.waiting || !s.done_all || !s.left || !s.begun || !s.started || !s.phase_start || !s.next_in_queue ||
        !s.hop || !s.qhead || !s.qtail || !s.busy || !s.link_touched || !s.rec_pid || !s.rec_start || !s.rec_end ||
        !s.link_time || !s.link_bytes || !s.xfer) {
        PyErr_NoMemory();
        goto done;
    }
    memcpy(s.left, p->step_left, (size_t)s.NS * 4);
    for (i64 l = 0; l < s.L; l++) s.qhead[l] = s.qtail[l] = -1;
    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = run_sim(&s);
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_BuildValue("(NNNNNLNNN)", bytes_of(s.rec_pid, s.nrec, 8), bytes_of(s.rec_start, s.nrec, 8),
                           bytes_of(s.rec_end, s.nrec, 8), bytes_of(s.link_time, s.L, 8),
                           bytes_of(s.link_bytes, s.L, 8), s.served,
                           bytes_of(s.xfer, s.timeline ? 4 * s.served : 0, 8), bytes_of(s.begun, s.NS, 1),
                           bytes_of(s.started, s.P, 1));
done:
    for (int i = 0; i < nv; i++) PyBuffer_Release(&views[i]);
    if (s.eligible)
        for (i64 g = 0; g < s.G; g++) free(s.eligible[g].v);
    if (s.order)
        for (i64 g = 0; g < s.G; g++) free(s.order[g].v);
    void *owned[] = {s.events.v, s.eligible, s.order, s.position, s.running, s.server_touched, s.count, s.count_time,
                     s.waiting, s.done_all, s.left, s.begun, s.started, s.phase_start, s.hop, s.next_in_queue,
                     s.qhead, s.qtail, s.busy, s.link_touched, s.touched_links.v, s.touched_servers.v, s.rec_pid, s.rec_start, s.rec_end, s.link_time, s.link_bytes, s.xfer};
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) free(owned[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"simulate", simulate, METH_VARARGS, "Execute a congestion plan (see astra_compile.runtime.congestion)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_linkcore", "Compiled congestion-aware event core.", -1,
                                    methods, NULL, NULL, NULL, NULL};

#ifndef LINKCORE_SOURCE_DIGEST
#define LINKCORE_SOURCE_DIGEST "unknown"
#endif

/* SOURCE_DIGEST: the digest of this file as built (setup.py), so a checkout whose source moved on is noticed. */
PyMODINIT_FUNC PyInit__linkcore(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddStringConstant(m, "SOURCE_DIGEST", LINKCORE_SOURCE_DIGEST) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
