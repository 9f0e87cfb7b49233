import asyncio, time
def handler():
    time.sleep(30)
async def serve():
    handler()
print("ready", flush=True)
asyncio.run(serve())
