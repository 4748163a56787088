/**
 * A bounded queue shared by many keys, served round-robin across keys and in order within a key:
 * whatever one key has queued, another key's work is taken after at most one turn of each key
 * with work waiting. Pure: no timers, no clock; callers decide what a turn is (count-queue.ts
 * gives each turn one slice of a text, so a long job cannot hold the tokenizer either).
 *
 * An item stays queued while it is served (it may take several turns) until `remove`: the
 * per-key cap counts what a key has queued or running, and a key with nothing left leaves the
 * rotation. Items have a weight (count-queue.ts: bytes of text), and the caps bound the sum, so a
 * key may queue many small items or a few large ones; a key with nothing queued may always queue
 * one item, however heavy, and so may anyone into an empty queue.
 */

export interface FairQueueLimits {
  /** Weight of the items queued or being served, all keys together. */
  capacity: number;
  /** Weight of the items queued or being served for one key. */
  perKey: number;
}

/** What `push` did: queued, or refused because the key or the whole queue is full. */
export type FairQueuePush = "queued" | "key_full" | "queue_full";

export interface FairQueue<T> {
  /** Queues `item` (of `weight`, default 1) at the back of `key`'s line, unless a cap refuses it. */
  push(key: string, item: T, weight?: number): FairQueuePush;
  /** The item whose turn it is (the oldest of the next key in rotation), left in the queue; undefined when empty. */
  next(): { key: string; item: T } | undefined;
  /** Takes an item out (served, timed out, abandoned); false when it was not queued. */
  remove(key: string, item: T): boolean;
  /** Items queued or being served. */
  readonly size: number;
  /** Items queued or being served for `key`. */
  sizeOf(key: string): number;
  /** Their weight, all keys together. */
  readonly weight: number;
  /** The weight of `key`'s items. */
  weightOf(key: string): number;
}

export function createFairQueue<T>(limits: FairQueueLimits): FairQueue<T> {
  /** Each key's items in order, and their weight. */
  const lines = new Map<string, { items: T[]; weights: number[]; weight: number }>();
  /** Keys with work, in the order they take turns; `turn` indexes the next. */
  const ring: string[] = [];
  let turn = 0;
  let size = 0;
  let total = 0;
  return {
    push(key, item, weight = 1) {
      const line = lines.get(key);
      if (line && line.weight + weight > limits.perKey) return "key_full";
      if (size > 0 && total + weight > limits.capacity) return "queue_full";
      if (line) {
        line.items.push(item);
        line.weights.push(weight);
        line.weight += weight;
      } else {
        lines.set(key, { items: [item], weights: [weight], weight });
        // At the end of the rotation: served after each key already waiting has had one turn.
        ring.push(key);
      }
      size++;
      total += weight;
      return "queued";
    },
    next() {
      if (ring.length === 0) return undefined;
      if (turn >= ring.length) turn = 0;
      const key = ring[turn++]!;
      return { key, item: lines.get(key)!.items[0]! };
    },
    remove(key, item) {
      const line = lines.get(key);
      const at = line ? line.items.indexOf(item) : -1;
      if (at < 0) return false;
      const [weight] = line!.weights.splice(at, 1);
      line!.items.splice(at, 1);
      line!.weight -= weight!;
      total -= weight!;
      size--;
      if (line!.items.length === 0) {
        lines.delete(key);
        const place = ring.indexOf(key);
        ring.splice(place, 1);
        // The keys after it move down one place; the next turn stays theirs.
        if (place < turn) turn--;
      }
      return true;
    },
    get size() {
      return size;
    },
    sizeOf(key) {
      return lines.get(key)?.items.length ?? 0;
    },
    get weight() {
      return total;
    },
    weightOf(key) {
      return lines.get(key)?.weight ?? 0;
    },
  };
}
