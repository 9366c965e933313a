"""Backend slots shared by every gateway process and replica, and the arbiter of free slots.

board.py     SharedSlots: the exchange with Redis, the capacity views, the arbiter
division.py  how free slots are divided, and the order of the deployment's best waiters
lua.py       the exchange script and its wire form
"""

from mindrouter.stores.slots.board import SharedSlots, SlotsUnavailable, SlotTiming

__all__ = ["SharedSlots", "SlotTiming", "SlotsUnavailable"]
