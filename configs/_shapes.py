"""The model shapes an objective's config can be built on: `configs/<objective>.py:<arg>,<shape>`.

One table for every objective config (interleaved, hrt, selfdraft), so a shape added here is a shape of all of
them. Private (leading underscore): not a config of its own, so `fastmt.configs.names()` leaves it out.
"""

from fastmt.configs import e12d1, e6d1, e6d6, quickstart, small

SHAPES = {'quickstart': quickstart, 'e6d6': e6d6, 'e6d1': e6d1, 'e12d1': e12d1, 'small': small}
