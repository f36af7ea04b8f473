"""On-demand work for one user, in either partitioning: dream, rebuild or forget (user_memory_job)."""
