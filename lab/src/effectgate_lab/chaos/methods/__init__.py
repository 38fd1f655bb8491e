"""The methods compared side by side: direct calls, the study's wrapper, a stable key, the gateway."""
