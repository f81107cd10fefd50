import asyncio

import aiohttp
import pytest

from demo.knobs import KNOBS


@pytest.fixture
def base(server):
    """The URL of the module's ``server``, with default knob values, zeroed counters and an empty token cache."""
    url = server[0]

    async def reset():
        async with aiohttp.ClientSession() as s:
            defaults = {k.name: k.default for k in KNOBS}
            async with s.post(f"{url}/_demo/knobs", json=defaults) as r:
                assert r.status == 200
            async with s.post(f"{url}/_demo/counters/reset") as r:
                assert r.status == 200

    asyncio.run(reset())
    return url
