import { crc32, deflateSync } from "node:zlib";

/**
 * A small real PNG drawn from a prompt: a diagonal gradient between two colours taken from
 * the prompt's hash, so the demo shows a picture and the same prompt draws the same one.
 */
export function drawPng(prompt: string, size = 64): Uint8Array {
  const hash = new Bun.CryptoHasher("sha256").update(prompt).digest();
  const [r1, g1, b1, r2, g2, b2] = hash;
  const row = 1 + size * 3;
  const pixels = Buffer.alloc(row * size);
  for (let y = 0; y < size; y++) {
    pixels[y * row] = 0; // filter: none
    for (let x = 0; x < size; x++) {
      const t = (x + y) / (2 * (size - 1));
      const at = y * row + 1 + x * 3;
      pixels[at] = Math.round(r1! + (r2! - r1!) * t);
      pixels[at + 1] = Math.round(g1! + (g2! - g1!) * t);
      pixels[at + 2] = Math.round(b1! + (b2! - b1!) * t);
    }
  }
  const header = Buffer.alloc(13);
  header.writeUInt32BE(size, 0);
  header.writeUInt32BE(size, 4);
  header[8] = 8; // bit depth
  header[9] = 2; // colour type: RGB
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk("IHDR", header),
    chunk("IDAT", deflateSync(pixels)),
    chunk("IEND", Buffer.alloc(0)),
  ]);
}

function chunk(type: string, data: Uint8Array): Buffer {
  const out = Buffer.alloc(12 + data.length);
  out.writeUInt32BE(data.length, 0);
  out.write(type, 4, "ascii");
  Buffer.from(data).copy(out, 8);
  out.writeUInt32BE(crc32(out.subarray(4, 8 + data.length)), 8 + data.length);
  return out;
}
