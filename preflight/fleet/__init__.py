"""The torchrun side: launching it on each node with its rendezvous bounded (``launch``), joining the job's
process group (``distributed``) and running one fleet run across its nodes (``orchestrate``): each node measures
once, rank 0 merges and writes one report.
"""
