"""Learning from data: recorded datasets (:mod:`.datasets`, the bottom layer), recording a session's
transitions into one (:mod:`.recording`) and off-policy evaluation of a policy on one (:mod:`.ope`).

The package imports nothing itself: its modules sit on different layers (``docs/architecture.md``).
"""
