"""The Prefect flows: the pipeline over dvc.yaml's DAG and the scheduled retrain (pipeline), one
flow per stage (stage_flows), their deployments (deploy) and a local server (server); `dispatch`
decides where a stage runs. The `shardline` command is shardline.cli, the tasks
shardline.orchestration.tasks, DVC shardline.dvcrepo."""
