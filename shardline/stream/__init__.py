"""Loading: the exact, elastic, O(1)-resumable stream of blocks over the shards (loader), the mix
(mixing), the per-epoch shuffle (permute), and shards streamed from object storage (remote,
shardcache).
"""
