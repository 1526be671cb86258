"""Studies: experiments that measure what evolm learns, each in its own package with its kept results."""
