//! The essay's two examples, made safe to retry: an order stream decrements stock
//! (`stock = stock - 1`) and records each payment, through the project's fault-injection proxy,
//! which loses a fifth of the acknowledgements after the write was applied. Each order is one
//! operation (its order id and time): a retry finds it applied and changes nothing. The naive
//! control — the same `$inc` and `$push`, retried on error — applies some orders twice.
//!
//! ```text
//! cargo run --example inventory
//! ```
//!
//! Uses `MONGODB_URI`, or starts the test engine (`scripts/db up`: FerretDB 2 on DocumentDB) when it is unset.

#[path = "common/mod.rs"]
mod common;
#[allow(dead_code)]
#[path = "../tests/support/proxy.rs"]
mod proxy;

use std::time::Duration;

use natural_key::bson::{doc, Document};
use natural_key::mongodb::options::ClientOptions;
use natural_key::mongodb::Client;
use natural_key::prelude::*;
use natural_key::{ApplyOutcome, Change, Collection, OpId, RetryPolicy};

/// A stocked item. `stock` and `payments` belong to relative updates: an upsert of the
/// item's description writes them only when it creates the item, and they are no part of
/// its content hash.
#[derive(NaturalKey, Serialize, Deserialize, Clone, Debug)]
struct Item {
    #[key]
    sku: String,
    #[key(timestamp)]
    listed_at: i64,
    name: String,
    #[natural_key(relative)]
    stock: i64,
    #[natural_key(relative)]
    payments: Vec<String>,
}

/// An order: its id and time name the operation.
struct Order {
    id: String,
    at: i64,
    sku: usize,
}

const ITEMS: usize = 5;
const ORDERS: usize = 200;
const STOCK: i64 = 1_000;

fn items() -> Vec<Item> {
    (0..ITEMS)
        .map(|i| Item {
            sku: format!("sku-{i}"),
            listed_at: 1_700_000_000_000,
            name: format!("Item {i}"),
            stock: STOCK,
            payments: Vec::new(),
        })
        .collect()
}

fn orders() -> Vec<Order> {
    (0..ORDERS)
        .map(|k| Order {
            id: format!("order-{k:04}"),
            at: 1_764_000_000_000 + k as i64,
            sku: k % ITEMS,
        })
        .collect()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let uri = common::mongodb_uri()?;
    let mut opts = ClientOptions::parse(&uri).await?;
    opts.retry_writes = Some(false);
    let client = Client::with_options(opts)?;
    let db = client.database("natural_key_inventory");
    common::drop_collection(&db.collection::<Document>("items")).await?;
    common::drop_collection(&db.collection::<Document>("naive")).await?;
    let catalogue = items();
    let direct = Collection::<Item>::open(&db, "items").await?;
    direct.upsert_many(&catalogue).await?;
    let naive_direct = db.collection::<Document>("naive");
    for it in &catalogue {
        naive_direct
            .insert_one(doc! {"_id": &it.sku, "stock": STOCK, "payments": []})
            .await?;
    }

    // Every write below goes through a proxy that loses 20% of the acknowledgements.
    let faults = proxy::Faults {
        drop_reply_after_apply: 0.2,
        ..proxy::Faults::none()
    };
    let proxy = proxy::Proxy::start(proxy::upstream_addr(&uri), faults, 1042).await;
    let mut lossy_opts = ClientOptions::parse(proxy.uri()).await?;
    lossy_opts.server_selection_timeout = Some(Duration::from_secs(5));
    let lossy = Client::with_options(lossy_opts)?.database("natural_key_inventory");
    let items = Collection::<Item>::new(lossy.collection("items"))
        .deployment(direct.deployment().clone())
        .await?;
    let naive = lossy.collection::<Document>("naive");
    let retry = RetryPolicy::default()
        .max_attempts(50)
        .initial_backoff(Duration::from_millis(1));

    let ids: Vec<Ulid> = catalogue.iter().map(|i| i.id()).collect::<Result<_, _>>()?;
    let (mut applied, mut recognised) = (0, 0);
    for order in orders() {
        // natural-key: one operation per order, the change and its record in one update.
        let change = Change::new()
            .inc("stock", -1)
            .push("payments", order.id.as_str());
        let op = OpId::new(order.id.as_str(), order.at);
        match items.apply(ids[order.sku], op, change).retry(retry).await? {
            ApplyOutcome::Applied => applied += 1,
            _ => recognised += 1,
        }
        // The naive control: the same change, retried whenever the reply is missing.
        let sku = &catalogue[order.sku].sku;
        let update = doc! {"$inc": {"stock": -1}, "$push": {"payments": &order.id}};
        while naive
            .update_one(doc! {"_id": sku}, update.clone())
            .await
            .is_err()
        {}
    }
    let lost = proxy.stats().faults();
    println!("{ORDERS} orders over {ITEMS} items; {lost} acknowledgements lost on the way\n");

    let per_item = (ORDERS / ITEMS) as i64;
    let mut naive_twice = 0;
    for it in &catalogue {
        let d = naive_direct
            .find_one(doc! {"_id": &it.sku})
            .await?
            .ok_or("naive item missing")?;
        let payments = d.get_array("payments")?.len() as i64;
        naive_twice += payments - per_item;
        println!(
            "naive {}: stock {} (want {}), {payments} payments (want {per_item})",
            it.sku,
            d.get_i64("stock")
                .or_else(|_| d.get_i32("stock").map(i64::from))?,
            STOCK - per_item
        );
    }
    println!("naive: {naive_twice} orders applied twice\n");

    let mut exact = true;
    for (it, id) in catalogue.iter().zip(&ids) {
        let d = db
            .collection::<Document>("items")
            .find_one(doc! {"_id": id.to_string()})
            .await?
            .ok_or("item missing")?;
        let stock = d.get_i64("stock")?;
        let payments = d.get_array("payments")?.len() as i64;
        exact &= stock == STOCK - per_item && payments == per_item;
        println!(
            "natural-key {}: stock {stock} (want {}), {payments} payments (want {per_item})",
            it.sku,
            STOCK - per_item
        );
    }
    println!("natural-key: {applied} applied, {recognised} retries found applied");
    if !exact {
        return Err("natural-key's stock or payments are not exact".into());
    }
    if naive_twice == 0 {
        return Err("the naive control applied nothing twice: were replies lost?".into());
    }
    println!("every order applied once: stock and payments exact");
    Ok(())
}
