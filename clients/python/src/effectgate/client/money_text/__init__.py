"""Money and what an action asks for, in words a person reads (Babel for the money)."""
