"""The child process that decodes large request bodies (`mindrouter.http.bodies`).

Reads one path per line on standard input, answers each with the pickled result of
`decode_sliced` behind its length (8 bytes, big-endian), and ends when its input closes.
"""

from __future__ import annotations

import os
import pickle
import sys

from mindrouter.http.bodies import decode_sliced


def main() -> None:
    # The lowest priority: the parse waits for the CPU while the gateway has requests to serve.
    os.nice(19)
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        answer = pickle.dumps(decode_sliced(line.rstrip(b"\n").decode()))
        out.write(len(answer).to_bytes(8, "big") + answer)
        out.flush()


if __name__ == "__main__":
    main()
