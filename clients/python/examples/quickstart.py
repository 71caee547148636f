import asyncio, os
from tenure_client import TenureClient

async def main() -> None:
    async with TenureClient(os.environ.get("TENURE_ADDR", "127.0.0.1:7419")) as client:
        async with client.acquire("jobs.nightly", "worker-1", ttl=5) as lease:
            for step in range(3):  # the work, while the lease is renewed in the background
                if not lease.is_held():
                    break  # lost it (lease.lost is set): stop acting as holder
                print(f"step {step} with fencing token {lease.fencing_token}")
                await asyncio.sleep(0.1)
        # Leaving the block released the lease for the next holder.

asyncio.run(main())
