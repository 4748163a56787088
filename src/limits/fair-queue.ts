/**
 * A bounded queue shared by many keys, served round-robin across keys and in order within a key:
 * whatever one key has queued, another key's work is taken after at most one turn of each key
 * with work waiting. Keys may be grouped (by account): turns then go round the groups, and round
 * each group's keys within its turns, so ten keys of one account get one account's share. Pure: no timers, no clock; callers decide what a turn is (count-queue.ts
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
  /** Weight of the items of one group's keys together (an account's); default no bound beyond `capacity`. */
  perGroup?: number;
}

/** What `push` did: queued, or refused because the key or the whole queue is full. */
export type FairQueuePush = "queued" | "key_full" | "queue_full";

export interface FairQueue<T> {
  /**
   * Queues `item` (of `weight`, default 1) at the back of `key`'s line, unless a cap refuses it.
   * `group` (an account; default the key itself): turns go round the groups with work, then round
   * a group's keys, so an account's many keys share one turn instead of taking one each. The caps
   * stay per key.
   */
  push(key: string, item: T, weight?: number, group?: string): FairQueuePush;
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
  /** The weight of the items of `group`'s keys. */
  weightOfGroup(group: string): number;
}

/** Names taking turns: `next()` gives the one whose turn it is; one leaving keeps the order of the rest. */
class Rotation {
  readonly names: string[] = [];
  #turn = 0;
  add(name: string): void {
    // At the end: served after each one already waiting has had its turn.
    this.names.push(name);
  }
  next(): string {
    if (this.#turn >= this.names.length) this.#turn = 0;
    return this.names[this.#turn++]!;
  }
  delete(name: string): void {
    const place = this.names.indexOf(name);
    this.names.splice(place, 1);
    // The names after it move down one place; the next turn stays theirs.
    if (place < this.#turn) this.#turn--;
  }
}

export function createFairQueue<T>(limits: FairQueueLimits): FairQueue<T> {
  /** Each key's items in order, their weight, and the group the key takes turns in. */
  const lines = new Map<string, { items: T[]; weights: number[]; weight: number; group: string }>();
  /** Groups with work, in the order they take turns; each group's keys with work, likewise. */
  const groups = new Rotation();
  const keysOf = new Map<string, Rotation>();
  const groupWeights = new Map<string, number>();
  const perGroup = limits.perGroup ?? Number.POSITIVE_INFINITY;
  let size = 0;
  let total = 0;
  return {
    push(key, item, weight = 1, group = key) {
      const line = lines.get(key);
      if (line && line.weight + weight > limits.perKey) return "key_full";
      // A key keeps the group it arrived with until its line empties.
      const joined = line ? line.group : group;
      const held = groupWeights.get(joined) ?? 0;
      // As for a key: a group with nothing queued may always queue one item.
      if (held > 0 && held + weight > perGroup) return "key_full";
      if (size > 0 && total + weight > limits.capacity) return "queue_full";
      groupWeights.set(joined, held + weight);
      if (line) {
        line.items.push(item);
        line.weights.push(weight);
        line.weight += weight;
      } else {
        lines.set(key, { items: [item], weights: [weight], weight, group: joined });
        let keys = keysOf.get(joined);
        if (!keys) {
          keysOf.set(joined, (keys = new Rotation()));
          groups.add(joined);
        }
        keys.add(key);
      }
      size++;
      total += weight;
      return "queued";
    },
    next() {
      if (groups.names.length === 0) return undefined;
      const key = keysOf.get(groups.next())!.next();
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
      const held = groupWeights.get(line!.group)! - weight!;
      if (held > 0) groupWeights.set(line!.group, held);
      else groupWeights.delete(line!.group);
      if (line!.items.length === 0) {
        lines.delete(key);
        const keys = keysOf.get(line!.group)!;
        keys.delete(key);
        if (keys.names.length === 0) {
          keysOf.delete(line!.group);
          groups.delete(line!.group);
        }
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
    weightOfGroup(group) {
      return groupWeights.get(group) ?? 0;
    },
  };
}
