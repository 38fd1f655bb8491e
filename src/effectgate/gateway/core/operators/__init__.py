"""The operators' side of the effect core: decisions (approve, deny, expiry), the verbs, the live inbox."""
