#!/usr/bin/env python3
"""Fire-and-forget publishing into a stream, two jetraft builds one after the other.

Usage: bench-fire-and-forget.py REF_BIN NEW_BIN JETRAFT_BENCH_BIN MSGS ROUNDS

Each round starts a fresh one-node server (-js, own store dir) per build, creates an R1 file
stream capturing `jetraft_bench.pubsub.>`, runs `jetraft-bench pubsub --msgs MSGS --size 128`
(one publisher that never waits, one core subscriber on the same subject), waits until the
stream stored every message, and prints the publish rate, the time until all were stored and
the server's peak RSS (VmHWM). Servers are stopped by PID.
"""
import asyncio, sys, time, subprocess, tempfile, socket
import nats

def free_port():
    s=socket.socket(); s.bind(("127.0.0.1",0)); p=s.getsockname()[1]; s.close(); return p

def hwm(pid):
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmHWM"): return int(l.split()[1])//1024

async def run(label, binary, bench, n):
    port=free_port(); d=tempfile.mkdtemp()
    p=subprocess.Popen([binary,"-a","127.0.0.1","-p",str(port),"-sd",d,"-js"],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL)
    try:
        deadline=time.time()+30
        while time.time()<deadline:
            try:
                socket.create_connection(("127.0.0.1",port),timeout=1).close()
                break
            except OSError:
                await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)
        nc=await nats.connect(f"nats://127.0.0.1:{port}")
        js=nc.jetstream()
        await js.add_stream(name="FF", subjects=["jetraft_bench.pubsub.>"])
        base=hwm(p.pid)
        t0=time.time()
        out=subprocess.run([bench,"pubsub","--url",f"nats://127.0.0.1:{port}","--msgs",str(n),"--size","128","--timeout","300"],capture_output=True,text=True)
        res=[l for l in out.stdout.splitlines() if l.startswith("RESULT")]
        t1=time.time()
        while True:
            si=await js.stream_info("FF")
            if si.state.messages>=n or time.time()-t1>300: break
            await asyncio.sleep(0.1)
        t2=time.time()
        rate=[x for x in (res[0].split() if res else []) if x.startswith("pub_msgs_per_sec") or x.startswith("msgs_per_sec")]
        print(f"{label}: pubsub {' '.join(rate)}; stream stored {si.state.messages} of {n}, all stored {t2-t0:.1f}s after the start; server peak RSS {hwm(p.pid)} MiB (idle with the stream: {base} MiB)", flush=True)
        await nc.close()
    finally:
        p.terminate(); p.wait()

async def main():
    ref, new, bench, n, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    for r in range(rounds):
        await run("reference", ref, bench, n)
        await run("new", new, bench, n)
asyncio.run(main())
