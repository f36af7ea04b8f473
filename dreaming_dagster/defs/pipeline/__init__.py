"""The graph domain: extraction, merge, links, refinement as user-partitioned assets; checks; rebuild job."""
