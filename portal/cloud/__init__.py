"""The cloud's portal side, in one room: setting a cloud cluster's queues up and tearing them down (`setup`), the
reconciler that compares what runs there with the portal's jobs (`reconciler`), keeping the price table in step
with the provider's list (`price_list`), their commands and task. Which clusters are cloud clusters the backend
says (`portal.clusters.connect.is_cloud`), never a kind; the comparison and the money paths read the catalog's
rates like any cluster's."""
