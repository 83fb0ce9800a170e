/*
 * spark_app._kmirror_copy: the copy loop's inner part in C against librdkafka (issue 16).
 *
 * One `Loop` owns one source consumer and one target producer (created from plain config
 * dicts: the Python clients' rd_kafka_t handles are not reachable). A round of ranges (one
 * per source partition) is assigned at explicit offsets; `pump()` then consumes batches,
 * produces each record (source partition, key, value, headers handed over without a copy,
 * CreateTime timestamp) and serves delivery reports, all with the GIL released, until its
 * time budget is spent or every range reached its end. Delivery reports are accounted per
 * range exactly as the Python loop does (kmirror_engine/copying/range_copy.py `_RangeState.on_delivery`):
 * upstream offsets queued in produce order and popped per report (librdkafka reports one
 * partition's messages in order), offset syncs on every drift change, latency sums.
 * The first failure (a delivery error, a consumer error, a record over the target topic's
 * limit, a produce error) is kept as text naming the source record by its offset; the
 * Python side (kmirror_engine/copying/native_copy.py) raises it as CopyError. Control (rounds, stall
 * timeout, logging) stays in Python: pump() returns at least every `budget_ms`.
 *
 * Not handled here (the Python loop is used for them): dead-letter topics, transactions
 * (exactly-once), byte budgets, bandwidth limits.
 *
 * Also here, for the batch copy path (issue 28): `append_records`, the per-record part of
 * merging small record batches (kmirror_engine/copying/batch_wire.py `merge`), which needs no
 * librdkafka but is ~100x cheaper in C than in Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <librdkafka/rdkafka.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* kmirror_engine/copying/record_limits.py: framing of one record alone in a batch */
#define BATCH_OVERHEAD_BYTES 61
#define RECORD_OVERHEAD_BYTES 21
#define HEADER_OVERHEAD_BYTES 10
#define FAILURE_LEN 1024
#define MAX_TRANSIENTS 8
#define UNKNOWN_PARTITION_TIMEOUT_MS 30000

enum { FAIL_NONE = 0, FAIL_RECORDS = 1, FAIL_DIRECT = 2 };

typedef struct {
    int64_t *buf;
    size_t cap, head, len;
} Ring;

typedef struct {
    char *source_topic, *target_topic;
    int32_t partition;
    int64_t start, end, check_above, limit; /* limit < 0: unknown */
    rd_kafka_topic_t *rkt;                  /* the producer's handle of target_topic */
    Ring pending;                           /* upstream offsets produced, not yet reported */
    int active;
    int64_t records, bytes, last_ts;
    int has_ts;
    int64_t drift, last_upstream;
    int has_drift;
    int64_t *syncs; /* (upstream, downstream) pairs */
    size_t nsyncs, capsyncs;
    int64_t lat_min, lat_max, lat_sum, lat_count;
} Range;

typedef struct {
    PyObject_HEAD
    rd_kafka_t *consumer, *producer;
    rd_kafka_queue_t *cq;
    Range *ranges;
    Py_ssize_t nranges, nactive;
    rd_kafka_topic_partition_list_t *positions; /* one entry per range, same order */
    int32_t *table; /* open addressing: range index per slot, -1 empty */
    size_t table_mask;
    const char *last_topic; /* the last lookup's consumer topic name pointer and result */
    int32_t last_partition;
    Range *last_range;
    rd_kafka_message_t **batch;
    size_t batch_size;
    int64_t now_ms;
    int fail_kind;
    int64_t nfailures;
    char failure[FAILURE_LEN];
    int ntransients;
    char transients[MAX_TRANSIENTS][256];
    int busy;
    int64_t last_position_ns;
    /* time spent per part of the loop (ns), for bench/profile_copy.py */
    int64_t ns_consume, ns_produce, ns_poll, ns_position, nconsumed;
} Loop;

static PyObject *CopyFailure;

static int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int ring_push(Ring *r, int64_t v) {
    if (r->len == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 1024;
        int64_t *buf = malloc(cap * sizeof *buf);
        if (!buf) return -1;
        for (size_t i = 0; i < r->len; i++) buf[i] = r->buf[(r->head + i) % r->cap];
        free(r->buf);
        r->buf = buf, r->cap = cap, r->head = 0;
    }
    r->buf[(r->head + r->len) % r->cap] = v;
    r->len++;
    return 0;
}

static int64_t ring_pop_front(Ring *r) {
    if (!r->len) return -1;
    int64_t v = r->buf[r->head];
    r->head = (r->head + 1) % r->cap;
    r->len--;
    return v;
}

static void ring_pop_back(Ring *r) {
    if (r->len) r->len--;
}

static void fail(Loop *self, int kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(Loop *self, int kind, const char *fmt, ...) {
    self->nfailures++;
    if (self->fail_kind != FAIL_NONE) return; /* the first failure is the one named */
    self->fail_kind = kind;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(self->failure, FAILURE_LEN, fmt, ap);
    va_end(ap);
}

static int64_t record_bytes(const rd_kafka_message_t *m) {
    int64_t size = BATCH_OVERHEAD_BYTES + RECORD_OVERHEAD_BYTES + (int64_t)m->key_len + (int64_t)m->len;
    rd_kafka_headers_t *hdrs = NULL;
    if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR && hdrs) {
        const char *name;
        const void *value;
        size_t vsize;
        for (size_t i = 0; rd_kafka_header_get_all(hdrs, i, &name, &value, &vsize) == RD_KAFKA_RESP_ERR_NO_ERROR; i++)
            size += HEADER_OVERHEAD_BYTES + (int64_t)strlen(name) + (int64_t)vsize;
    }
    return size;
}

static int is_too_large(rd_kafka_resp_err_t err) {
    return err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE || err == RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE;
}

/* librdkafka reconnects by itself after these: logged, the copy waits (kmirror_engine/copying/range_copy.py TRANSIENT) */
static int is_transient(rd_kafka_resp_err_t err) {
    switch (err) {
    case RD_KAFKA_RESP_ERR__TRANSPORT:
    case RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN:
    case RD_KAFKA_RESP_ERR__TIMED_OUT:
    case RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT:
    case RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION:
    case RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR__RESOLVE:
        return 1;
    default:
        return 0;
    }
}

/* Delivery report: the Python loop's _RangeState.on_delivery, per record, in C. */
static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    (void)rk;
    Loop *self = opaque;
    Range *r = m->_private;
    int64_t upstream = ring_pop_front(&r->pending);
    if (m->err) {
        const char *why = rd_kafka_err2str(m->err);
        if (is_too_large(m->err) && r->limit >= 0) {
            int64_t full = record_bytes(m);
            if (full <= r->limit) {
                fail(self, FAIL_RECORDS,
                     "source record %s[%d]@%lld (%lld bytes) fits %s's limit of %lld bytes but its batch was "
                     "rejected as too large (%s); it is not dead-lettered; the producer's batch.size and "
                     "message.max.bytes must not exceed the topic's max.message.bytes",
                     r->source_topic, r->partition, (long long)upstream, (long long)full, r->target_topic,
                     (long long)r->limit, why);
                return;
            }
        }
        fail(self, FAIL_RECORDS, "delivery to %s[%d] failed for source record %s[%d]@%lld: %s", r->target_topic,
             r->partition, r->source_topic, r->partition, (long long)upstream, why);
        return;
    }
    int64_t drift = m->offset - upstream;
    if (!r->has_drift || drift != r->drift) {
        if (r->nsyncs == r->capsyncs) {
            size_t cap = r->capsyncs ? r->capsyncs * 2 : 8;
            int64_t *syncs = realloc(r->syncs, cap * 2 * sizeof *syncs);
            if (!syncs) {
                fail(self, FAIL_DIRECT, "out of memory recording offset syncs of %s[%d]", r->source_topic,
                     r->partition);
                return;
            }
            r->syncs = syncs, r->capsyncs = cap;
        }
        r->syncs[2 * r->nsyncs] = upstream;
        r->syncs[2 * r->nsyncs + 1] = m->offset;
        r->nsyncs++;
        r->drift = drift, r->has_drift = 1;
    }
    r->last_upstream = upstream;
    int64_t latency = self->now_ms - rd_kafka_message_timestamp(m, NULL);
    r->lat_sum += latency;
    r->lat_count++;
    if (latency > r->lat_max) r->lat_max = latency;
    if (latency < r->lat_min) r->lat_min = latency;
}

static uint64_t slot_hash(const char *topic, int32_t partition) {
    uint64_t h = 1469598103934665603ULL;
    for (const unsigned char *p = (const unsigned char *)topic; *p; p++) h = (h ^ *p) * 1099511628211ULL;
    return (h ^ (uint64_t)(uint32_t)partition) * 0x9E3779B97F4A7C15ULL;
}

static Range *find_range(Loop *self, const char *topic, int32_t partition) {
    if (topic == self->last_topic && partition == self->last_partition) return self->last_range;
    Range *found = NULL;
    for (size_t slot = slot_hash(topic, partition) & self->table_mask;; slot = (slot + 1) & self->table_mask) {
        int32_t i = self->table[slot];
        if (i < 0) break;
        Range *r = &self->ranges[i];
        if (r->partition == partition && !strcmp(r->source_topic, topic)) {
            found = r;
            break;
        }
    }
    self->last_topic = topic, self->last_partition = partition, self->last_range = found;
    return found;
}

static void finish(Loop *self, Range *r) {
    if (!r->active) return;
    r->active = 0;
    self->nactive--;
    rd_kafka_topic_partition_list_t *one = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(one, r->source_topic, r->partition);
    rd_kafka_pause_partitions(self->consumer, one);
    rd_kafka_topic_partition_list_destroy(one);
}

/* Finish ranges whose consumer position reached their end (e.g. only transaction markers left).
 * A safety net: partition-EOF events and the first record past the end finish ranges too. Each
 * rd_kafka_position() lookup searches the topic by name, so this runs over the active ranges
 * only and at most every 250 us per active range (8 ranges: every 2 ms; 4,000: every second):
 * with 4,000 partitions a check per consumed batch took 9 of 16 s. */
#define POSITION_CHECK_NS_PER_RANGE 250000LL
#define POSITION_CHECK_NS_MAX 1000000000LL
static int finish_by_position(Loop *self) {
    int64_t now = mono_ns();
    int64_t interval = (int64_t)self->nactive * POSITION_CHECK_NS_PER_RANGE;
    if (interval > POSITION_CHECK_NS_MAX) interval = POSITION_CHECK_NS_MAX;
    if (!self->nactive || now - self->last_position_ns < interval) return 0;
    self->last_position_ns = now;
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new((int)self->nactive);
    Py_ssize_t *index = malloc((size_t)self->nactive * sizeof *index);
    if (!index) {
        rd_kafka_topic_partition_list_destroy(list);
        return 0;
    }
    for (Py_ssize_t i = 0; i < self->nranges; i++) {
        if (!self->ranges[i].active) continue;
        index[list->cnt] = i;
        rd_kafka_topic_partition_list_add(list, self->ranges[i].source_topic, self->ranges[i].partition);
    }
    int finished = 0;
    rd_kafka_position(self->consumer, list);
    for (int k = 0; k < list->cnt; k++) {
        Range *r = &self->ranges[index[k]];
        int64_t pos = list->elems[k].offset;
        if (r->active && pos >= 0 && pos >= r->end) {
            finish(self, r);
            finished = 1;
        }
    }
    free(index);
    rd_kafka_topic_partition_list_destroy(list);
    return finished;
}

static void note_transient(Loop *self, const char *text) {
    if (self->ntransients < MAX_TRANSIENTS)
        snprintf(self->transients[self->ntransients], sizeof self->transients[0], "%s", text);
    self->ntransients++;
}

/* Produce one consumed record; retries a full local queue and (for a while) a partition the
 * producer does not know yet. Returns 0, or -1 after a failure was recorded. */
static int produce_one(Loop *self, Range *r, rd_kafka_message_t *m) {
    int64_t ts = rd_kafka_message_timestamp(m, NULL);
    rd_kafka_headers_t *hdrs = NULL;
    rd_kafka_message_detach_headers(m, &hdrs); /* handed to the produced message, no copy */
    if (ring_push(&r->pending, m->offset)) {
        if (hdrs) rd_kafka_headers_destroy(hdrs);
        fail(self, FAIL_DIRECT, "out of memory queueing source record %s[%d]@%lld", r->source_topic, r->partition,
             (long long)m->offset);
        return -1;
    }
    int64_t deadline = 0;
    for (;;) {
        rd_kafka_resp_err_t err = rd_kafka_producev(
            self->producer, RD_KAFKA_V_RKT(r->rkt), RD_KAFKA_V_PARTITION(r->partition),
            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_VALUE(m->payload, m->len),
            RD_KAFKA_V_KEY(m->key, m->key_len), RD_KAFKA_V_TIMESTAMP(ts > 0 ? ts : 0), RD_KAFKA_V_HEADERS(hdrs),
            RD_KAFKA_V_OPAQUE(r), RD_KAFKA_V_END);
        if (!err) return 0; /* the message owns the headers now */
        if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            self->now_ms = wall_ms();
            rd_kafka_poll(self->producer, 50); /* serve delivery reports, then retry */
            if (self->fail_kind != FAIL_NONE) break;
            continue;
        }
        if (err == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION) {
            /* the target topic grew (TargetTopics) after this producer cached its metadata */
            int64_t now = wall_ms();
            if (!deadline) deadline = now + UNKNOWN_PARTITION_TIMEOUT_MS;
            if (now < deadline) {
                const struct rd_kafka_metadata *md = NULL;
                if (rd_kafka_metadata(self->producer, 0, r->rkt, &md, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR && md)
                    rd_kafka_metadata_destroy(md);
                continue;
            }
        }
        fail(self, FAIL_DIRECT, "cannot produce source record %s[%d]@%lld (%zu bytes) to %s[%d]: %s",
             r->source_topic, r->partition, (long long)m->offset, m->len, r->target_topic, r->partition,
             rd_kafka_err2str(err));
        break;
    }
    ring_pop_back(&r->pending);
    if (hdrs) rd_kafka_headers_destroy(hdrs);
    return -1;
}

/* One consumed message or event; returns 1 when it moved the copy, -1 after a failure. */
static int handle(Loop *self, rd_kafka_message_t *m) {
    const char *topic = m->rkt ? rd_kafka_topic_name(m->rkt) : NULL;
    if (m->err) {
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            Range *r = topic ? find_range(self, topic, m->partition) : NULL;
            if (r && r->active && m->offset >= r->end) finish(self, r);
            return 0;
        }
        if (is_transient(m->err)) {
            char text[256];
            snprintf(text, sizeof text, "%s", rd_kafka_message_errstr(m));
            note_transient(self, text);
            return 0;
        }
        fail(self, FAIL_DIRECT, "consuming %s[%d] failed: %s", topic ? topic : "None", m->partition,
             rd_kafka_message_errstr(m));
        return -1;
    }
    Range *r = find_range(self, topic, m->partition);
    if (!r || !r->active) return 0; /* prefetched past a finished range */
    if (m->offset >= r->end) {
        finish(self, r);
        return 1;
    }
    int64_t size = (int64_t)m->len + (int64_t)m->key_len;
    if (size > r->check_above) {
        int64_t full = record_bytes(m);
        if (r->limit >= 0 && full > r->limit) {
            fail(self, FAIL_DIRECT,
                 "cannot produce source record %s[%d]@%lld (%lld bytes) to %s[%d]: over the topic's "
                 "max.message.bytes (%lld); raise it on the target or set dead_letter_topic",
                 r->source_topic, r->partition, (long long)m->offset, (long long)full, r->target_topic,
                 r->partition, (long long)r->limit);
            return -1;
        }
    }
    int64_t ts = rd_kafka_message_timestamp(m, NULL);
    if (produce_one(self, r, m)) return -1;
    r->records++;
    r->bytes += size;
    r->last_ts = ts, r->has_ts = 1;
    return 1;
}

static void free_round(Loop *self) {
    for (Py_ssize_t i = 0; i < self->nranges; i++) {
        Range *r = &self->ranges[i];
        if (r->rkt) rd_kafka_topic_destroy(r->rkt);
        free(r->source_topic);
        free(r->target_topic);
        free(r->pending.buf);
        free(r->syncs);
    }
    free(self->ranges);
    free(self->table);
    if (self->positions) rd_kafka_topic_partition_list_destroy(self->positions);
    self->ranges = NULL, self->table = NULL, self->positions = NULL;
    self->nranges = self->nactive = 0;
    self->last_topic = NULL, self->last_range = NULL;
}

static int check_open(Loop *self) {
    if (!self->consumer || !self->producer) {
        PyErr_SetString(PyExc_RuntimeError, "the native copy loop is closed");
        return -1;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the native copy loop is in use by another thread");
        return -1;
    }
    return 0;
}

static void destroy_clients(Loop *self) {
    /* lists librdkafka filled in (position, pause, resume) hold partition references that
     * rd_kafka_destroy() would wait for forever */
    if (self->positions) rd_kafka_topic_partition_list_destroy(self->positions);
    self->positions = NULL;
    if (self->cq) rd_kafka_queue_destroy(self->cq);
    self->cq = NULL;
    if (self->consumer) {
        rd_kafka_consumer_close(self->consumer);
        rd_kafka_destroy(self->consumer);
    }
    for (Py_ssize_t i = 0; i < self->nranges; i++) { /* destroy waits for every topic handle */
        if (self->ranges[i].rkt) rd_kafka_topic_destroy(self->ranges[i].rkt);
        self->ranges[i].rkt = NULL;
    }
    if (self->producer) {
        /* undelivered records are dropped: the copy failed and its batch is retried */
        rd_kafka_purge(self->producer, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        rd_kafka_destroy(self->producer);
    }
    self->consumer = self->producer = NULL;
    free_round(self); /* after the producer: its reports point into the ranges */
}

static rd_kafka_conf_t *make_conf(PyObject *dict, const char *what) {
    if (!PyDict_Check(dict)) {
        PyErr_Format(PyExc_TypeError, "%s config must be a dict", what);
        return NULL;
    }
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    char errstr[512];
    while (PyDict_Next(dict, &pos, &key, &value)) {
        const char *k = PyUnicode_AsUTF8(key);
        const char *v = k ? PyUnicode_AsUTF8(value) : NULL;
        if (!k || !v) {
            rd_kafka_conf_destroy(conf);
            PyErr_Format(PyExc_TypeError, "%s config: every key and value must be a str", what);
            return NULL;
        }
        if (rd_kafka_conf_set(conf, k, v, errstr, sizeof errstr) != RD_KAFKA_CONF_OK) {
            rd_kafka_conf_destroy(conf);
            PyErr_Format(PyExc_ValueError, "%s config: %s", what, errstr);
            return NULL;
        }
    }
    return conf;
}

/* A client made from `conf` (which it then owns); NULL with a ValueError naming `what` when
 * librdkafka refuses it, `conf` destroyed (librdkafka leaves a refused conf to its caller). */
static rd_kafka_t *new_client(rd_kafka_type_t type, rd_kafka_conf_t *conf, const char *what) {
    char errstr[512];
    rd_kafka_t *client = rd_kafka_new(type, conf, errstr, sizeof errstr);
    if (!client) {
        rd_kafka_conf_destroy(conf);
        PyErr_Format(PyExc_ValueError, "cannot create the %s: %s", what, errstr);
    }
    return client;
}

static int Loop_init(Loop *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"consumer_config", "producer_config", "batch_size", NULL};
    PyObject *cdict, *pdict;
    Py_ssize_t batch_size = 1000;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|n", kwlist, &cdict, &pdict, &batch_size)) return -1;
    if (self->consumer || self->producer) {
        PyErr_SetString(PyExc_RuntimeError, "Loop.__init__ called twice");
        return -1;
    }
    if (batch_size < 1) batch_size = 1;
    rd_kafka_conf_t *pconf = make_conf(pdict, "producer");
    if (!pconf) return -1;
    rd_kafka_conf_set_dr_msg_cb(pconf, on_delivery);
    rd_kafka_conf_set_opaque(pconf, self);
    rd_kafka_conf_t *cconf = make_conf(cdict, "consumer");
    if (!cconf) {
        rd_kafka_conf_destroy(pconf);
        return -1;
    }
    /* the producer first: its id request then overlaps the consumer's first fetch */
    self->producer = new_client(RD_KAFKA_PRODUCER, pconf, "target producer");
    if (!self->producer) {
        rd_kafka_conf_destroy(cconf);
        return -1;
    }
    self->consumer = new_client(RD_KAFKA_CONSUMER, cconf, "source consumer");
    if (!self->consumer) {
        destroy_clients(self);
        return -1;
    }
    rd_kafka_poll_set_consumer(self->consumer);
    self->cq = rd_kafka_queue_get_consumer(self->consumer);
    if (!self->cq) {
        destroy_clients(self);
        PyErr_SetString(PyExc_ValueError, "the source consumer needs a group.id");
        return -1;
    }
    self->batch_size = (size_t)batch_size;
    self->batch = calloc(self->batch_size, sizeof *self->batch);
    if (!self->batch) {
        destroy_clients(self);
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void Loop_dealloc(Loop *self) {
    destroy_clients(self);
    free(self->batch);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* start(ranges): a new round; ranges are (source_topic, partition, start, end, target_topic,
 * check_above, limit) tuples, at most one per source partition; assigns the unfinished ones. */
static PyObject *Loop_start(Loop *self, PyObject *arg) {
    if (check_open(self)) return NULL;
    PyObject *seq = PySequence_Fast(arg, "ranges must be a sequence");
    if (!seq) return NULL;
    free_round(self);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    size_t slots = 16;
    while (slots < (size_t)n * 2) slots *= 2;
    self->ranges = calloc(n ? n : 1, sizeof *self->ranges);
    self->table = malloc(slots * sizeof *self->table);
    self->positions = rd_kafka_topic_partition_list_new((int)(n ? n : 1));
    if (!self->ranges || !self->table) {
        Py_DECREF(seq);
        free_round(self);
        return PyErr_NoMemory();
    }
    memset(self->table, 0xff, slots * sizeof *self->table);
    self->table_mask = slots - 1;
    self->fail_kind = FAIL_NONE, self->nfailures = 0, self->ntransients = 0;
    rd_kafka_topic_partition_list_t *assign = rd_kafka_topic_partition_list_new((int)(n ? n : 1));
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *src, *dst;
        int partition;
        long long start, end, check_above, limit;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "siLLsLL;a range is (source_topic, partition, "
                              "start, end, target_topic, check_above, limit)", &src, &partition, &start, &end, &dst,
                              &check_above, &limit)) {
            rd_kafka_topic_partition_list_destroy(assign);
            Py_DECREF(seq);
            free_round(self);
            return NULL;
        }
        Range *r = &self->ranges[i];
        self->nranges = i + 1;
        r->source_topic = strdup(src), r->target_topic = strdup(dst);
        r->partition = partition, r->start = start, r->end = end, r->check_above = check_above, r->limit = limit;
        r->rkt = rd_kafka_topic_new(self->producer, dst, NULL);
        if (!r->rkt || !r->source_topic || !r->target_topic) { /* an invalid name, or out of memory */
            rd_kafka_resp_err_t why = rd_kafka_last_error();
            if (r->rkt) PyErr_NoMemory();
            else PyErr_Format(CopyFailure, "target topic %.300s: librdkafka refused a handle for it: %s", dst,
                              rd_kafka_err2str(why));
            rd_kafka_topic_partition_list_destroy(assign);
            Py_DECREF(seq);
            free_round(self);
            return NULL;
        }
        r->lat_min = INT64_MAX, r->lat_max = INT64_MIN, r->last_upstream = -1;
        r->active = start < end;
        rd_kafka_topic_partition_list_add(self->positions, src, partition);
        size_t slot = slot_hash(src, partition) & self->table_mask;
        while (self->table[slot] >= 0) slot = (slot + 1) & self->table_mask;
        self->table[slot] = (int32_t)i;
        if (r->active) {
            self->nactive++;
            rd_kafka_topic_partition_list_add(assign, src, partition)->offset = start;
        }
    }
    Py_DECREF(seq);
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
    if (assign->cnt) err = rd_kafka_assign(self->consumer, assign);
    rd_kafka_topic_partition_list_destroy(assign);
    if (err) {
        PyErr_Format(CopyFailure, "assigning the source partitions failed: %s", rd_kafka_err2str(err));
        return NULL;
    }
    Py_RETURN_NONE;
}

/* pump(budget_ms, poll_timeout_ms) -> (active ranges left, moved, transient consumer errors):
 * copies with the GIL released until the budget is spent, every range ended, or a failure. */
static PyObject *Loop_pump(Loop *self, PyObject *args) {
    int budget_ms, poll_timeout_ms;
    if (!PyArg_ParseTuple(args, "ii", &budget_ms, &poll_timeout_ms)) return NULL;
    if (check_open(self)) return NULL;
    int moved = 0;
    self->ntransients = 0;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    int64_t deadline = mono_ns() + (int64_t)budget_ms * 1000000;
    while (self->nactive > 0 && self->fail_kind == FAIL_NONE) {
        int64_t t0 = mono_ns();
        ssize_t n = rd_kafka_consume_batch_queue(self->cq, poll_timeout_ms, self->batch, self->batch_size);
        int64_t t1 = mono_ns();
        self->ns_consume += t1 - t0;
        if (n < 0) {
            fail(self, FAIL_DIRECT, "consuming from the source failed: %s", rd_kafka_err2str(rd_kafka_last_error()));
            break;
        }
        self->nconsumed += n;
        for (ssize_t i = 0; i < n; i++) {
            if (self->fail_kind == FAIL_NONE && handle(self, self->batch[i]) > 0) moved = 1;
            rd_kafka_message_destroy(self->batch[i]);
        }
        int64_t t2 = mono_ns();
        self->ns_produce += t2 - t1;
        self->now_ms = wall_ms();
        rd_kafka_poll(self->producer, 0);
        int64_t t3 = mono_ns();
        self->ns_poll += t3 - t2;
        if (self->fail_kind != FAIL_NONE) break;
        if (finish_by_position(self) || n > 0) moved = 1;
        int64_t t4 = mono_ns();
        self->ns_position += t4 - t3;
        if (t4 >= deadline) break;
    }
    Py_END_ALLOW_THREADS
    self->busy = 0;
    PyObject *transients = PyList_New(0);
    if (!transients) return NULL;
    for (int i = 0; i < self->ntransients && i < MAX_TRANSIENTS; i++) {
        PyObject *text = PyUnicode_DecodeUTF8(self->transients[i], strlen(self->transients[i]), "replace");
        if (!text || PyList_Append(transients, text)) {
            Py_XDECREF(text);
            Py_DECREF(transients);
            return NULL;
        }
        Py_DECREF(text);
    }
    return Py_BuildValue("nNN", self->nactive, PyBool_FromLong(moved), transients);
}

/* failure() -> None or (kind, count, first message): kind 1 = failed deliveries (count them), 2 = a
 * failure reported as is. */
static PyObject *Loop_failure(Loop *self, PyObject *unused) {
    (void)unused;
    if (self->fail_kind == FAIL_NONE) Py_RETURN_NONE;
    PyObject *text = PyUnicode_DecodeUTF8(self->failure, strlen(self->failure), "replace");
    if (!text) return NULL;
    return Py_BuildValue("iLN", self->fail_kind, (long long)self->nfailures, text);
}

/* release(): end the round's assignment (clearing the pause flags librdkafka keeps across assignments). */
static PyObject *Loop_release(Loop *self, PyObject *unused) {
    (void)unused;
    if (!self->consumer) Py_RETURN_NONE;
    if (self->positions && self->positions->cnt) rd_kafka_resume_partitions(self->consumer, self->positions);
    rd_kafka_assign(self->consumer, NULL);
    for (Py_ssize_t i = 0; i < self->nranges; i++) self->ranges[i].active = 0;
    self->nactive = 0;
    Py_RETURN_NONE;
}

/* flush(timeout_ms) -> records still awaiting a delivery report (0: all reported). */
static PyObject *Loop_flush(Loop *self, PyObject *args) {
    int timeout_ms;
    if (!PyArg_ParseTuple(args, "i", &timeout_ms)) return NULL;
    if (check_open(self)) return NULL;
    int remaining;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    self->now_ms = wall_ms();
    rd_kafka_flush(self->producer, timeout_ms);
    remaining = rd_kafka_outq_len(self->producer);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    return PyLong_FromLong(remaining);
}

/* active() -> [(source_topic, partition, end)] of the ranges not finished. */
static PyObject *Loop_active(Loop *self, PyObject *unused) {
    (void)unused;
    PyObject *out = PyList_New(0);
    for (Py_ssize_t i = 0; out && i < self->nranges; i++) {
        Range *r = &self->ranges[i];
        if (!r->active) continue;
        PyObject *item = Py_BuildValue("siL", r->source_topic, r->partition, (long long)r->end);
        if (!item || PyList_Append(out, item)) Py_CLEAR(out);
        Py_XDECREF(item);
    }
    return out;
}

/* results() -> per range, in start() order: (records, bytes, last_timestamp_ms or None, syncs
 * [(upstream, downstream)], drift or None, last_upstream, lat_min, lat_max, lat_sum, lat_count). */
static PyObject *Loop_results(Loop *self, PyObject *unused) {
    (void)unused;
    PyObject *out = PyList_New(self->nranges);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < self->nranges; i++) {
        Range *r = &self->ranges[i];
        PyObject *syncs = PyList_New((Py_ssize_t)r->nsyncs);
        if (!syncs) {
            Py_DECREF(out);
            return NULL;
        }
        for (size_t s = 0; s < r->nsyncs; s++)
            PyList_SET_ITEM(syncs, s, Py_BuildValue("LL", (long long)r->syncs[2 * s], (long long)r->syncs[2 * s + 1]));
        PyObject *ts = r->has_ts ? PyLong_FromLongLong(r->last_ts) : Py_NewRef(Py_None);
        PyObject *drift = r->has_drift ? PyLong_FromLongLong(r->drift) : Py_NewRef(Py_None);
        PyObject *item = Py_BuildValue("LLNNNLLLLL", (long long)r->records, (long long)r->bytes, ts, syncs, drift,
                                       (long long)r->last_upstream, (long long)r->lat_min, (long long)r->lat_max,
                                       (long long)r->lat_sum, (long long)r->lat_count);
        if (!item) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, item);
    }
    return out;
}

/* timings() -> ns spent consuming, producing (loop body), polling reports, checking positions; records consumed */
static PyObject *Loop_timings(Loop *self, PyObject *unused) {
    (void)unused;
    return Py_BuildValue("{sLsLsLsLsL}", "consume_ns", (long long)self->ns_consume, "produce_ns",
                         (long long)self->ns_produce, "poll_ns", (long long)self->ns_poll, "position_ns",
                         (long long)self->ns_position, "consumed", (long long)self->nconsumed);
}

static PyObject *Loop_close(Loop *self, PyObject *unused) {
    (void)unused;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the native copy loop is in use by another thread");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    destroy_clients(self);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static Py_ssize_t Loop_len(Loop *self) {
    return self->producer ? rd_kafka_outq_len(self->producer) : 0;
}

static PyMethodDef Loop_methods[] = {
    {"start", (PyCFunction)Loop_start, METH_O, "start(ranges): assign a new round of ranges"},
    {"pump", (PyCFunction)Loop_pump, METH_VARARGS, "pump(budget_ms, poll_timeout_ms) -> (active, moved, transients)"},
    {"failure", (PyCFunction)Loop_failure, METH_NOARGS, "failure() -> None | (kind, count, message)"},
    {"release", (PyCFunction)Loop_release, METH_NOARGS, "release(): resume and unassign the round's partitions"},
    {"flush", (PyCFunction)Loop_flush, METH_VARARGS, "flush(timeout_ms) -> records awaiting a report"},
    {"active", (PyCFunction)Loop_active, METH_NOARGS, "active() -> [(source_topic, partition, end)]"},
    {"results", (PyCFunction)Loop_results, METH_NOARGS, "results() -> per-range accounting tuples"},
    {"timings", (PyCFunction)Loop_timings, METH_NOARGS, "timings() -> time per part of the loop (ns)"},
    {"close", (PyCFunction)Loop_close, METH_NOARGS, "close(): close the consumer, drop the producer"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods Loop_as_sequence = {.sq_length = (lenfunc)Loop_len};

static PyTypeObject LoopType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "spark_app._kmirror_copy.Loop",
    .tp_basicsize = sizeof(Loop),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Loop(consumer_config, producer_config, batch_size=1000): one native consume->produce loop",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Loop_init,
    .tp_dealloc = (destructor)Loop_dealloc,
    .tp_methods = Loop_methods,
    .tp_as_sequence = &Loop_as_sequence,
};

/* ---------- the batch path's merge (kmirror_engine/copying/batch_wire.py `merge`) ---------- */

#define GROWTH_PER_RECORD 32

/* An unsigned varint of at most `max` bytes at *at (< end); -1 when it runs past `end` or is too long. */
static int read_uvarint(const uint8_t *buf, Py_ssize_t *at, Py_ssize_t end, int max, uint64_t *value) {
    uint64_t v = 0;
    for (int i = 0; i < max; i++) {
        if (*at >= end) return -1;
        uint8_t byte = buf[(*at)++];
        v |= (uint64_t)(byte & 0x7F) << (7 * i);
        if (!(byte & 0x80)) {
            *value = v;
            return 0;
        }
    }
    return -1;
}

static int64_t unzigzag(uint64_t raw) { return (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1); }

/* `value` as a zigzag varint into out (room for 10 bytes); returns the bytes written. */
static int write_zigzag(uint8_t *out, int64_t value) {
    uint64_t v = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    int n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

static int zigzag_len(int64_t value) {
    uint8_t scratch[10];
    return write_zigzag(scratch, value);
}

/* append_records(out, data, start, count, offset_shift, ts_shift): append the `count` records
 * of a v2 batch (`data`, records from `start`) to the bytearray `out`, each byte-identical but
 * for its length, offset delta (+ offset_shift) and timestamp delta (+ ts_shift). ValueError
 * on a record that runs past the batch or a malformed varint; `out` is then left as it was. */
static PyObject *append_records(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *out;
    Py_buffer data;
    Py_ssize_t start, count;
    long long offset_shift, ts_shift;
    if (!PyArg_ParseTuple(args, "Yy*nnLL", &out, &data, &start, &count, &offset_shift, &ts_shift)) return NULL;
    const uint8_t *buf = data.buf;
    Py_ssize_t end = data.len, at = start, old = PyByteArray_GET_SIZE(out), i = 0;
    if (start < 0 || start > end || count < 0) goto malformed;
    /* a record's three rewritten varints grow it by at most 27 bytes (each from 1 byte to at most
     * 10: the shifted deltas are written as 64-bit zigzag varints, as batch_merge._zigzag does) */
    if (count > (PY_SSIZE_T_MAX - old - (end - start)) / GROWTH_PER_RECORD ||
        PyByteArray_Resize(out, old + (end - start) + count * GROWTH_PER_RECORD) < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    uint8_t *dst = (uint8_t *)PyByteArray_AS_STRING(out), *w = dst + old;
    for (i = 0; i < count; i++) {
        uint64_t raw;
        if (read_uvarint(buf, &at, end, 10, &raw) < 0) goto malformed_resized;
        int64_t length = unzigzag(raw);
        if (length < 1 || length > end - at) goto malformed_resized;
        Py_ssize_t body_end = at + (Py_ssize_t)length, pos = at + 1;
        uint8_t attributes = buf[at];
        uint64_t ts_raw, off_raw;
        if (read_uvarint(buf, &pos, body_end, 10, &ts_raw) < 0 || read_uvarint(buf, &pos, body_end, 10, &off_raw) < 0)
            goto malformed_resized;
        int64_t ts = unzigzag(ts_raw) + ts_shift, off = unzigzag(off_raw) + offset_shift;
        Py_ssize_t rest = body_end - pos, head = 1 + zigzag_len(ts) + zigzag_len(off);
        w += write_zigzag(w, (int64_t)(head + rest));
        *w++ = attributes;
        w += write_zigzag(w, ts);
        w += write_zigzag(w, off);
        memcpy(w, buf + pos, (size_t)rest);
        w += rest;
        at = body_end;
    }
    PyBuffer_Release(&data);
    if (PyByteArray_Resize(out, w - dst) < 0) return NULL;
    Py_RETURN_NONE;
malformed_resized:
    PyByteArray_Resize(out, old);
malformed:
    PyBuffer_Release(&data);
    PyErr_Format(PyExc_ValueError, "record %zd of the batch is malformed or runs past its batch", i);
    return NULL;
}

static PyObject *librdkafka_version(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    return Py_BuildValue("si", rd_kafka_version_str(), rd_kafka_version());
}

static PyMethodDef module_methods[] = {
    {"librdkafka_version", librdkafka_version, METH_NOARGS, "the librdkafka this module runs against"},
    {"append_records", append_records, METH_VARARGS,
     "append_records(out, data, start, count, offset_shift, ts_shift): a batch's records, deltas shifted"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kmirror_copy", "Native copy loop (issue 16).", -1,
                                    module_methods};

PyMODINIT_FUNC PyInit__kmirror_copy(void) {
    if (PyType_Ready(&LoopType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    CopyFailure = PyErr_NewException("spark_app._kmirror_copy.CopyFailure", NULL, NULL);
    Py_INCREF(&LoopType);
    if (!CopyFailure || PyModule_AddObject(m, "Loop", (PyObject *)&LoopType) ||
        PyModule_AddObject(m, "CopyFailure", CopyFailure)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
