#!/usr/bin/python3
"""Writes Fashion-MNIST's IDX files out as an image folder, for `flotilla train --dataset images`:

    OUT/train/<k>_<name>/<index>.png   and   OUT/test/<k>_<name>/<index>.png

The class folders are numbered so that their sorted order is the IDX label order. By default
the images are the original 28x28 grayscale pixels. With --colour each image becomes RGB: its
ink and its background get one of 64 random colour pairs, drawn per image and independent of
the label, so that a model still has to learn the shapes (the 3-channel benchmark job).

Only the standard library: gzip, zlib and struct are enough to write PNG.
"""

import argparse
import gzip
import os
import random
import struct
import zlib

CLASSES = ["tshirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot"]


def read_idx(path):
    with (gzip.open(path) if path.endswith(".gz") else open(path, "rb")) as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return shape, data[4 + 4 * dims:]


def find(folder, stem):
    for name in (stem + ".gz", stem):
        if os.path.exists(os.path.join(folder, name)):
            return os.path.join(folder, name)
    raise SystemExit(f"{folder} has no {stem}[.gz]")


def png(width, height, rows, colour):
    """rows: height rows of raw bytes (1 or 3 per pixel)."""
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
    header = struct.pack(">IIBBBBB", width, height, 8, 2 if colour else 0, 0, 0, 0)
    raw = b"".join(b"\x00" + r for r in rows)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")


def colour_tables(seed, count=64):
    """count (ink, background) colour pairs as byte translation tables, one per channel."""
    rng = random.Random(seed)
    tables = []
    for _ in range(count):
        ink = [rng.randint(96, 255) for _ in range(3)]
        background = [rng.randint(0, 80) for _ in range(3)]
        tables.append([bytes(int(b + (i - b) * v / 255 + 0.5) for v in range(256)) for i, b in zip(ink, background)])
    return tables


def write_split(images_path, labels_path, out, colour, seed):
    (n, h, w), pixels = read_idx(images_path)
    _, labels = read_idx(labels_path)
    for k, name in enumerate(CLASSES):
        os.makedirs(os.path.join(out, f"{k}_{name}"), exist_ok=True)
    tables = colour_tables(seed) if colour else None
    rng = random.Random(seed + 1)
    for i in range(n):
        image = pixels[i * h * w:(i + 1) * h * w]
        if colour:
            t = tables[rng.randrange(len(tables))]
            rgb = bytearray(3 * h * w)
            for c in range(3):
                rgb[c::3] = image.translate(t[c])
            rows = [bytes(rgb[y * 3 * w:(y + 1) * 3 * w]) for y in range(h)]
        else:
            rows = [image[y * w:(y + 1) * w] for y in range(h)]
        k = labels[i]
        with open(os.path.join(out, f"{k}_{CLASSES[k]}", f"{i:05d}.png"), "wb") as f:
            f.write(png(w, h, rows, colour))
    return n


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--idx", default="/usr/share/datasets/fashion-mnist", help="folder of the IDX files")
    parser.add_argument("--out", required=True, help="image folder to write (train/ and test/ inside)")
    parser.add_argument("--colour", action="store_true", help="RGB with random ink and background colours")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    for split, stem, seed in (("train", "train", args.seed), ("test", "t10k", args.seed + 100)):
        n = write_split(find(args.idx, f"{stem}-images-idx3-ubyte"), find(args.idx, f"{stem}-labels-idx1-ubyte"),
                        os.path.join(args.out, split), args.colour, seed)
        print(f"{split}: {n} images in {os.path.join(args.out, split)}")


if __name__ == "__main__":
    main()
