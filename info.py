import asyncio, json, sys, nats
async def main():
    nc = await nats.connect(sys.argv[1])
    print("INFO:", {k:v for k,v in nc._server_info.items() if k in ("jetstream","headers","server_name")})
    try:
        r = await nc.request("$JS.API.INFO", b"", timeout=2)
        print("API.INFO:", r.data[:200], r.headers)
    except Exception as e:
        print("API.INFO err:", type(e).__name__, e)
    await nc.close()
asyncio.run(main())
