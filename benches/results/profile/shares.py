"""Shares of a broker's CPU samples from folded stacks (inferno-collapse-perf output).

    python3 shares.py b-after.folded.gz           # the cost table of profile.md
    python3 shares.py b-after.folded.gz --top 60  # every frame's inclusive share, and self shares

A share is the fraction of all samples whose stack contains a matching frame (inclusive).
"""
import gzip
import sys, re, collections
f = sys.argv[1]
opener = gzip.open if f.endswith('.gz') else open
tot = 0; incl = collections.Counter(); self_ = collections.Counter(); threads = collections.Counter()
lines = [l.decode() if isinstance(l, bytes) else l for l in opener(f)]
for line in lines:
    stack, n = line.rsplit(' ', 1); n = int(n); tot += n
    frames = stack.split(';')
    threads[frames[0]] += n
    seen = set()
    for fr in frames:
        fr2 = re.sub(r'<[^<>]*>', '', re.sub(r'<[^<>]*>', '', re.sub(r'<[^<>]*>', '', fr)))
        fr2 = re.sub(r'::h[0-9a-f]{16}', '', fr2)
        if fr2 not in seen:
            incl[fr2] += n; seen.add(fr2)
    leaf = re.sub(r'::h[0-9a-f]{16}', '', frames[-1]); self_[leaf] += n
TABLE = [
    ("frame decode: JSON header -> RemotingCommand", r"json_header::decode$"),
    ("send processing (SEND_MESSAGE_V2 handler)", r"processor::send::send_message$"),
    ("... of which the send header's fields", r"SendMessageRequestHeader::decode$"),
    ("... of which store_message (properties, record encode, append)", r"processor::send::store_message$"),
    ("pull processing (PULL_MESSAGE, first and woken passes)", r"processor::pull::pull$"),
    ("response encode (Outbox::push: header JSON, framing)", r"server::Outbox::push$"),
    ("socket reads (recv)", r"^__libc_recv$"),
    ("socket writes (writev)", r"^__GI___writev$"),
    ("worker parking and wake-ups (park, epoll_wait, futex)", r"worker::Context::park$"),
    ("reaper thread", r"^baiji-reaper$"),
    ("allocator (mimalloc, anywhere)", r"^_?mi_"),
]
if '--top' not in sys.argv:
    for name, pat in TABLE:
        rx = re.compile(pat)
        n = 0
        for line in lines:
            stack, k = line.rsplit(' ', 1)
            frames = [re.sub(r'::h[0-9a-f]{16}', '', re.sub(r'<[^<>]*>', '', re.sub(r'<[^<>]*>', '', re.sub(r'<[^<>]*>', '', x)))) for x in stack.split(';')]
            if any(rx.search(x) for x in frames):
                n += int(k)
        print(f'| {name} | {n / tot * 100:.1f} % |')
    sys.exit(0)
print('total', tot)
print('--threads'); [print(f'{v/tot*100:5.1f}% {k}') for k, v in threads.most_common(8)]
print('--inclusive'); [print(f'{v/tot*100:5.1f}% {k[:150]}') for k, v in incl.most_common(int(sys.argv[sys.argv.index('--top') + 1]))]
print('--self'); [print(f'{v/tot*100:5.1f}% {k[:150]}') for k, v in self_.most_common(40)]
