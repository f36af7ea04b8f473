"""The service's routes, one router a resource: pairs, recall, dreaming (sync), users, operations."""
