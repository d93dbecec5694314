package io.weft.sdk.export;

import io.weft.sdk.trace.SpanRecord;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.atomic.AtomicReferenceArray;

/**
 * A bounded single-producer multi-consumer queue of span records for reuse (after Vyukov's bounded
 * queue: each slot carries a sequence number, so consumers claim a slot with one CAS and never see
 * a half-written slot). Only the export thread puts records back, so {@link #offer} needs no CAS
 * (span_sampled_* and export_queue_* benchmarks: the export thread must keep up with application
 * threads on shared cores); threads starting spans take them, with {@link #pollSingle} when the
 * pool belongs to one thread's lane. When the pool is empty a new record is allocated, and when it
 * is full a returned record is left to the garbage collector, so its memory stays bounded by its
 * capacity.
 */
final class RecordPool {
  private final AtomicReferenceArray<SpanRecord> slots;
  private final AtomicLongArray seq;
  private final int mask;
  private final AtomicLong enqueue = new PaddedCounter();
  private final AtomicLong dequeue = new PaddedCounter();

  /** A pool of at most {@code capacity} (a power of two) records. */
  RecordPool(int capacity) {
    slots = new AtomicReferenceArray<>(capacity);
    seq = new AtomicLongArray(capacity);
    mask = capacity - 1;
    for (int i = 0; i < capacity; i++) {
      seq.set(i, i);
    }
  }

  /**
   * Puts a record back; returns false (dropping it) when the pool is full. Called only by the
   * export thread (the pool's one producer).
   */
  boolean offer(SpanRecord r) {
    long pos = enqueue.get();
    int i = (int) pos & mask;
    if (seq.get(i) != pos) {
      return false; // full: that slot's record has not been taken yet
    }
    slots.lazySet(i, r);
    seq.lazySet(i, pos + 1); // publishes the slot to consumers
    enqueue.lazySet(pos + 1);
    return true;
  }

  /**
   * {@link #poll} for a pool with one consumer (an export lane's, polled only by the thread that
   * holds the lane): the same slot protocol without the CAS on {@code dequeue}.
   */
  SpanRecord pollSingle() {
    long pos = dequeue.get();
    int i = (int) pos & mask;
    if (seq.get(i) != pos + 1) {
      return null;
    }
    SpanRecord r = slots.get(i);
    slots.lazySet(i, null);
    seq.lazySet(i, pos + mask + 1); // frees the slot for producers
    dequeue.lazySet(pos + 1);
    return r;
  }

  /** Takes a record (not yet cleared), or returns null when the pool is empty. */
  SpanRecord poll() {
    long pos = dequeue.get();
    while (true) {
      int i = (int) pos & mask;
      long d = seq.get(i) - (pos + 1);
      if (d == 0) {
        if (dequeue.compareAndSet(pos, pos + 1)) {
          SpanRecord r = slots.get(i);
          slots.lazySet(i, null);
          seq.lazySet(i, pos + mask + 1); // frees the slot for producers
          return r;
        }
        pos = dequeue.get();
      } else if (d < 0) {
        return null;
      } else {
        pos = dequeue.get();
      }
    }
  }
}
