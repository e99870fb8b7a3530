//! The demo behind `cargo xtask demo`: builds a throw-away namespace pair joined by a
//! veth, attaches the load balancer's XDP program to one end, sends packets from the
//! other, shows the program's counter, then detaches and deletes everything.

use std::{net::UdpSocket, time::Duration};

use anyhow::{Context as _, bail};
use lb_tests::netns::NetNs;
use lb_user::dataplane::{AttachMode, Dataplane as _, KernelDataplane, LoadOptions};

fn main() -> anyhow::Result<()> {
    if !lb_tests::is_root() {
        bail!("the demo needs root (network namespaces, XDP): run `sudo -E cargo xtask demo`");
    }
    println!("demo: creating namespaces");
    let lb = NetNs::create("lbdemo-lb")?;
    let client = NetNs::create("lbdemo-c")?;
    lb.ip(&["link", "add", "lb0", "type", "veth", "peer", "name", "c0"])?;
    lb.ip(&["link", "set", "c0", "netns", client.name()])?;
    lb.ip(&["addr", "add", "192.0.2.1/24", "dev", "lb0"])?;
    lb.ip(&["link", "set", "lb0", "up"])?;
    client.ip(&["addr", "add", "192.0.2.10/24", "dev", "c0"])?;
    client.ip(&["link", "set", "c0", "up"])?;

    println!("demo: loading the XDP program and attaching it to lb0 (native mode)");
    let mut dp =
        KernelDataplane::load(LoadOptions::default()).context("loading the XDP program")?;
    lb.enter(|| dp.attach("lb0", AttachMode::Native))??;
    let before = dp.global_stats()?.total();

    println!("demo: sending 20 UDP datagrams from the client namespace to 192.0.2.1:9");
    client.enter(|| -> anyhow::Result<()> {
        let socket = UdpSocket::bind("192.0.2.10:0")?;
        for i in 0..20u8 {
            socket.send_to(&[i; 32], "192.0.2.1:9")?;
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    })??;
    std::thread::sleep(Duration::from_millis(100));
    let seen = dp.global_stats()?.total() - before;
    println!("demo: the XDP program counted {seen} packets on lb0 (20 UDP plus ARP)");

    println!("demo: detaching and deleting the namespaces");
    dp.detach()?;
    drop(dp);
    drop(client);
    drop(lb);
    if seen < 20 {
        bail!("expected at least 20 packets through XDP, counted {seen}");
    }
    println!("demo: done");
    Ok(())
}
